#!/usr/bin/env python3
"""Turns criterion's output into an SVG bar chart (Python standard library
only): one bar per benchmark, the mean time per iteration on a log scale,
with the 95% confidence interval of the mean as a whisker.

    cargo bench --bench extender             # writes target/criterion/
    python3 scripts/plot-figures.py          # writes benches/figures.svg

Options:
    --criterion DIR   criterion's output directory (default target/criterion)
    --out FILE        the SVG to write (default benches/figures.svg)
    --group NAME      only benchmarks of this group (repeatable)
    --title TEXT      the chart's title

Each benchmark is read from <DIR>/**/new/benchmark.json (its group, function
and parameter) and the estimates.json beside it (point estimate and
confidence interval of the mean, in nanoseconds).
"""
import argparse
import html
import json
import math
import os
import sys


def find_benchmarks(root, groups):
    out = []
    for dirpath, _dirs, files in os.walk(root):
        if os.path.basename(dirpath) != "new":
            continue
        if "benchmark.json" not in files or "estimates.json" not in files:
            continue
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            bench = json.load(f)
        with open(os.path.join(dirpath, "estimates.json")) as f:
            est = json.load(f)
        group = bench.get("group_id", "")
        if groups and group not in groups:
            continue
        label = "/".join(
            p for p in (bench.get("function_id"), bench.get("value_str")) if p
        ) or bench.get("title", dirpath)
        mean = est["mean"]
        out.append(
            {
                "group": group,
                "label": label,
                "value": bench.get("value_str") or "",
                "mean": mean["point_estimate"],
                "lo": mean["confidence_interval"]["lower_bound"],
                "hi": mean["confidence_interval"]["upper_bound"],
            }
        )

    def key(b):
        v = b["value"]
        num = float(v) if v.replace(".", "", 1).isdigit() else math.inf
        return (b["group"], b["label"].rsplit("/", 1)[0] if b["value"] else b["label"], num)

    out.sort(key=key)
    return out


def fmt_ns(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def svg(benches, title):
    row, top, left, right, bar = 22, 56, 260, 120, 14
    width = 960
    plot_w = width - left - right
    groups = []
    for b in benches:
        if not groups or groups[-1][0] != b["group"]:
            groups.append((b["group"], []))
        groups[-1][1].append(b)
    height = top + sum(len(g[1]) * row + row for g in groups) + 40
    lo = min(b["lo"] for b in benches)
    hi = max(b["hi"] for b in benches)
    dmin = 10 ** math.floor(math.log10(max(lo, 1e-3)))
    dmax = 10 ** math.ceil(math.log10(hi))
    if dmax <= dmin:
        dmax = dmin * 10

    def x(ns):
        return left + plot_w * (math.log10(max(ns, dmin)) - math.log10(dmin)) / (
            math.log10(dmax) - math.log10(dmin)
        )

    e = html.escape
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="16">{e(title)}</text>',
        f'<text x="{width / 2}" y="42" text-anchor="middle" fill="#555">mean time per call '
        "(log scale), whisker: 95% confidence interval</text>",
    ]
    # Decade grid lines.
    decade = dmin
    while decade <= dmax * 1.0001:
        gx = x(decade)
        out.append(
            f'<line x1="{gx:.1f}" y1="{top - 6}" x2="{gx:.1f}" y2="{height - 34}" stroke="#ddd"/>'
        )
        out.append(
            f'<text x="{gx:.1f}" y="{height - 20}" text-anchor="middle" fill="#555">{e(fmt_ns(decade))}</text>'
        )
        decade *= 10
    y = top
    palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"]
    for gi, (group, items) in enumerate(groups):
        out.append(f'<text x="8" y="{y + 12}" font-weight="bold">{e(group)}</text>')
        y += row
        color = palette[gi % len(palette)]
        for b in items:
            cy = y + row / 2
            out.append(
                f'<text x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end">{e(b["label"])}</text>'
            )
            out.append(
                f'<rect x="{left}" y="{cy - bar / 2:.1f}" width="{max(x(b["mean"]) - left, 1):.1f}" '
                f'height="{bar}" fill="{color}"><title>{e(group)} {e(b["label"])}: '
                f'{e(fmt_ns(b["mean"]))}</title></rect>'
            )
            out.append(
                f'<line x1="{x(b["lo"]):.1f}" y1="{cy:.1f}" x2="{x(b["hi"]):.1f}" y2="{cy:.1f}" '
                'stroke="black"/>'
            )
            out.append(
                f'<text x="{x(b["hi"]) + 6:.1f}" y="{cy + 4:.1f}">{e(fmt_ns(b["mean"]))}</text>'
            )
            y += row
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--criterion", default="target/criterion")
    p.add_argument("--out", default="benches/figures.svg")
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--title", default="kruntimes-scheduler benchmarks (criterion)")
    a = p.parse_args()
    benches = find_benchmarks(a.criterion, set(a.group))
    if not benches:
        sys.exit(f"no criterion results under {a.criterion}: run `cargo bench` first")
    with open(a.out, "w") as f:
        f.write(svg(benches, a.title))
    print(f"wrote {a.out}: {len(benches)} benchmarks")


if __name__ == "__main__":
    main()
