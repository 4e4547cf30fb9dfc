//! kube-scheduler's extender client over a real loopback connection, as
//! its `HTTPExtender` uses one: plain HTTP/1.1, requests with a
//! `Content-Length`, keep-alive. The serial verbs (filter, prioritize,
//! preempt) go one after another over one connection; each bind, issued
//! from its own binding goroutine, opens its own connection while others
//! are open (Go's transport keeps only a few idle ones).

use serde_json::{Value, json};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One keep-alive HTTP/1.1 connection, replaced when the server closed it
/// while it was idle, as Go's transport does: its read loop sees the close
/// of a pooled connection and the next request dials a new one.
pub struct Conn {
    addr: SocketAddr,
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> std::io::Result<Conn> {
        Ok(Conn {
            addr,
            stream: Self::dial(addr).await?,
            buf: Vec::new(),
        })
    }

    async fn dial(addr: SocketAddr) -> std::io::Result<TcpStream> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// Dials again if the server closed the idle connection (hyper closes
    /// a keep-alive connection with no new request within its header
    /// read timeout).
    async fn redial_if_closed(&mut self) -> std::io::Result<()> {
        let mut probe = [0u8; 1];
        match self.stream.try_read(&mut probe) {
            // Bytes while idle: answered below as whatever they are.
            Ok(n) if n > 0 => self.buf.push(probe[0]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // Closed (end of stream) or broken.
            _ => {
                self.stream = Self::dial(self.addr).await?;
                self.buf.clear();
            }
        }
        Ok(())
    }

    /// POSTs JSON to `path`: the status and the body. An error when the
    /// server closed the connection during the request or answered what
    /// this cannot read.
    pub async fn post(&mut self, path: &str, body: &str) -> std::io::Result<(u16, Vec<u8>)> {
        self.redial_if_closed().await?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        self.stream.write_all(head.as_bytes()).await?;
        self.stream.write_all(body.as_bytes()).await?;
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("no status in {head:?}")))?;
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .ok_or_else(|| bad(format!("no content-length in {head:?}")))?;
        while self.buf.len() < end + len {
            self.fill().await?;
        }
        let body = self.buf[end..end + len].to_vec();
        self.buf.drain(..end + len);
        Ok((status, body))
    }

    async fn fill(&mut self) -> std::io::Result<()> {
        let mut chunk = [0u8; 8192];
        let n = self.stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(bad("the server closed the connection".into()));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

fn bad(m: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, m)
}

/// A cache-capable filter body (`Pod`, `NodeNames`).
pub fn filter_body(pod: &Value, nodes: &[String]) -> String {
    json!({"Pod": pod, "NodeNames": nodes}).to_string()
}

/// A bind body for a pod built by [`crate::testkit::pod`] (uid
/// `<name>-uid`).
pub fn bind_body(namespace: &str, name: &str, node: &str) -> String {
    json!({"PodName": name, "PodNamespace": namespace, "PodUID": format!("{name}-uid"), "Node": node})
        .to_string()
}

/// One bind on a connection of its own, as a binding goroutine issues it:
/// the `Error` answered (empty: bound).
pub async fn bind_alone(addr: SocketAddr, body: String) -> std::io::Result<String> {
    let mut c = Conn::connect(addr).await?;
    let (status, bytes) = c.post("/scheduler/bind", &body).await?;
    if status != 200 {
        return Err(bad(format!(
            "bind answered {status}: {}",
            String::from_utf8_lossy(&bytes)
        )));
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    Ok(v["Error"].as_str().unwrap_or_default().to_owned())
}

/// The node names a filter answer lets through, and the reasons of the
/// nodes it failed (`FailedNodes` and `FailedAndUnresolvableNodes`).
pub fn filter_outcome(bytes: &[u8]) -> (Vec<String>, Vec<(String, String, bool)>) {
    let v: Value = serde_json::from_slice(bytes).expect("filter answers JSON");
    let names = v["NodeNames"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut failed = Vec::new();
    for (key, unresolvable) in [("FailedNodes", false), ("FailedAndUnresolvableNodes", true)] {
        if let Some(m) = v[key].as_object() {
            for (n, why) in m {
                failed.push((
                    n.clone(),
                    why.as_str().unwrap_or_default().to_owned(),
                    unresolvable,
                ));
            }
        }
    }
    (names, failed)
}
