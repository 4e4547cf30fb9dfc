#!/usr/bin/env python3
"""Writes manifests/components/monitoring/dashboard.json, the Grafana
dashboard of the monitoring component, from the panel list below (Python
standard library only). Edit the list and run it again:

    python3 scripts/gen-dashboard.py

tests/it/monitoring.rs parses every PromQL expression in the output and
checks each metric it names against a real scrape.
"""
import json
import os

RATE = "[$__rate_interval]"
DS = {"type": "prometheus", "uid": "${datasource}"}

# (title, unit, [(legend, expr)]), two panels per row.
PANELS = [
    ("Extender latency p99 by verb", "s", [
        ("{{verb}}", "histogram_quantile(0.99, sum by (verb, le) (rate(kruntimes_extender_request_duration_seconds_bucket" + RATE + ")))"),
    ]),
    ("Extender requests by verb and outcome", "reqps", [
        ("{{verb}} {{outcome}}", "sum by (verb, outcome) (rate(kruntimes_extender_request_duration_seconds_count" + RATE + "))"),
    ]),
    ("Decision latency p99 by operation", "s", [
        ("{{operation}}", "histogram_quantile(0.99, sum by (operation, le) (rate(kruntimes_decision_duration_seconds_bucket" + RATE + ")))"),
    ]),
    ("Run scheduling latency (creation to Scheduled)", "s", [
        ("p50", "histogram_quantile(0.5, sum by (le) (rate(kruntimes_run_scheduling_duration_seconds_bucket" + RATE + ")))"),
        ("p99", "histogram_quantile(0.99, sum by (le) (rate(kruntimes_run_scheduling_duration_seconds_bucket" + RATE + ")))"),
    ]),
    ("Pending Runs by reason", "short", [
        ("{{reason}}", "max by (reason) (kruntimes_runs_pending{job=\"kruntimes-scheduler-metrics\"})"),
    ]),
    ("Oldest pending Run", "s", [
        ("oldest", "max(kruntimes_runs_pending_oldest_seconds{job=\"kruntimes-scheduler-metrics\"})"),
    ]),
    ("Gang waits by outcome", "ops", [
        ("{{outcome}}", "sum by (outcome) (rate(kruntimes_gang_waits_total" + RATE + "))"),
    ]),
    ("Gang members held, groups waiting for quorum", "short", [
        ("members held", "sum(kruntimes_gang_members_held)"),
        ("groups waiting", "sum(kruntimes_gang_groups_waiting)"),
    ]),
    ("Admission verdicts by webhook", "ops", [
        ("{{webhook}} {{verdict}}", "sum by (webhook, verdict) (rate(kruntimes_admission_verdicts_total" + RATE + "))"),
    ]),
    ("Admission review latency p99 by webhook", "s", [
        ("{{webhook}}", "histogram_quantile(0.99, sum by (webhook, le) (rate(kruntimes_admission_review_duration_seconds_bucket" + RATE + ")))"),
    ]),
    ("Cache sizes by kind", "short", [
        ("{{job}} {{kind}}", "max by (job, kind) (kruntimes_cache_objects)"),
    ]),
    ("Extender bind failures by cause", "ops", [
        ("{{cause}}", "sum by (cause) (rate(kruntimes_extender_bind_failures_total" + RATE + "))"),
    ]),
    ("Watch errors and restarts by kind", "short", [
        ("errors {{kind}}", "sum by (kind) (increase(kruntimes_watch_errors_total" + RATE + "))"),
        ("restarts {{kind}}", "sum by (kind) (increase(kruntimes_watch_restarts_total" + RATE + "))"),
    ]),
    ("Run scheduler leader", "short", [
        ("{{instance}}", "max by (instance) (kruntimes_leader{job=\"kruntimes-scheduler-metrics\"})"),
    ]),
    ("Resident memory", "bytes", [
        ("{{job}} {{instance}}", "process_resident_memory_bytes{job=~\"kruntimes-.*\"}"),
    ]),
    ("CPU", "percentunit", [
        ("{{job}} {{instance}}", "rate(process_cpu_seconds_total{job=~\"kruntimes-.*\"}" + RATE + ")"),
    ]),
    ("Open file descriptors", "short", [
        ("{{job}} {{instance}}", "process_open_fds{job=~\"kruntimes-.*\"}"),
    ]),
    ("Certificate expiry", "dtdateTime", [
        ("{{certificate}}", "min by (certificate) (kruntimes_certificate_expiry_timestamp_seconds) * 1000"),
    ]),
]


def panel(i, title, unit, targets):
    return {
        "id": i + 1,
        "type": "timeseries",
        "title": title,
        "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + j), "datasource": DS, "expr": expr, "legendFormat": legend}
            for j, (legend, expr) in enumerate(targets)
        ],
    }


dashboard = {
    "uid": "kruntimes-scheduler",
    "title": "kruntimes-scheduler",
    "tags": ["kruntimes", "scheduler"],
    "timezone": "browser",
    "schemaVersion": 39,
    "version": 1,
    "refresh": "30s",
    "time": {"from": "now-6h", "to": "now"},
    "templating": {
        "list": [
            {
                "name": "datasource",
                "label": "Data source",
                "type": "datasource",
                "query": "prometheus",
                "current": {},
                "hide": 0,
            }
        ]
    },
    "panels": [panel(i, *p) for i, p in enumerate(PANELS)],
}

out = os.path.join(os.path.dirname(__file__), "..", "manifests", "components", "monitoring", "dashboard.json")
with open(out, "w") as f:
    json.dump(dashboard, f, indent=2)
    f.write("\n")
print(f"wrote {os.path.normpath(out)} ({len(PANELS)} panels)")
