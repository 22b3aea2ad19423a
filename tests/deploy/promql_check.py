#!/usr/bin/env python3
"""A real Prometheus scrapes a real fresneld under load, and every PromQL expression that deploy/
ships is evaluated through Prometheus's HTTP API: the Grafana dashboard's targets and variable
queries, the recording and alerting rules (an alert's quantity without its threshold, too), and
the prometheus-adapter rule behind the HPA. Each must parse and return data.

Data is required from every expression whose fresnel_* metrics the server exports. The only
exceptions are the metrics in ABSENT_HERE, which a CPU-only fresneld cannot export or which no
served workload creates yet: their expressions must still parse, and data is required from them
as soon as the server exports them. Usage: promql_check.py FRESNELD FRESNEL SOURCE_DIR"""
import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Harness, fail, wait_for  # noqa: E402

ABSENT_HERE = {
    "fresnel_transfer_seconds": "host<->device copies happen on GPUs only",
    "fresnel_sessions": "no served workload opens sessions yet (fusion, volume rendering)",
    "fresnel_sessions_dropped_total": "no served workload opens sessions yet",
    "fresnel_device_memory_used_bytes": "GPU memory pools only",
}
# Dashboard variables as "All" selects them, and Grafana's rate window.
GRAFANA_VARS = {"$__rate_interval": "1m", "$instance": ".*", "$service": ".*"}
COMPARISON = re.compile(r"^(?P<quantity>.+?)\s+(?:>|<|>=|<=|==|!=)\s+[-+0-9.e]+$", re.S)


def expressions(source):
    """(where, expr, needs_data) for every PromQL expression in deploy/. A quiet alert's whole
    expression has no data: it must parse, and its quantity must return data."""
    out = []
    dash = json.load(open(os.path.join(source, "deploy/grafana/fresnel-dashboard.json")))
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            out.append((f"dashboard panel '{panel['title']}' {t['refId']}", t["expr"], True))
    for var in dash["templating"]["list"]:
        q = var.get("query")
        if isinstance(q, dict):
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q["query"])
            if not m:
                fail(f"dashboard variable {var['name']}: cannot read {q['query']!r}")
            out.append((f"dashboard variable ${var['name']}", m.group(1), True))
    rules = yaml.safe_load(open(os.path.join(source, "deploy/prometheus/rules/fresnel.rules.yml")))
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule.get("record") or rule.get("alert")
            out.append((f"rule {name}", rule["expr"], "record" in rule))
            if "alert" in rule:
                m = COMPARISON.match(rule["expr"].strip())
                if not m:
                    fail(f"alert {name}: expr is not '<quantity> <comparison> <number>'")
                out.append((f"alert {name} quantity", m.group("quantity"), True))
            else:
                out.append((f"recorded series {name}", name, True))
    adapter = yaml.safe_load(open(os.path.join(source, "deploy/k8s/prometheus-adapter/adapter-config.yaml")))
    for rule in yaml.safe_load(adapter["data"]["config.yaml"])["rules"]:
        series = re.match(r"(\w+)", rule["seriesQuery"]).group(1)
        q = (rule["metricsQuery"].replace("<<.Series>>", series)
             .replace("<<.LabelMatchers>>", 'job="fresnel"').replace("<<.GroupBy>>", "instance"))
        out.append((f"prometheus-adapter {rule['name']['as']}", q, True))
    for key, value in GRAFANA_VARS.items():
        out = [(w, e.replace(key, value), d) for w, e, d in out]
    return out


def main():
    fresneld, fresnel, source = sys.argv[1:4]
    exprs = expressions(source)
    start = time.monotonic()
    with Harness(fresneld, fresnel, "promql") as h:
        # --job-ttl 1: finished jobs expire, so that fresnel_jobs_dropped_total has a series.
        server = h.start_fresneld("--job-ttl", "1", "--instance", "promql-check")
        h.start_prometheus([server], os.path.join(source, "deploy/prometheus/prometheus-local.yml"))
        # Load on every workload, and a few errors.
        for script, *args in (("make_demo_phase.py", "phase.npy", "mask.npy", "64", "80"),
                              ("make_demo_image.py", "img.png", "16")):
            subprocess.run([sys.executable, os.path.join(source, "scripts", script), *args],
                           cwd=h.dir, check=True, capture_output=True, timeout=60)
        h.cli(server.address, "bench", "--op", "resample_poly", "--samples", "8192",
              "--concurrency", "4", "--duration", "2")
        h.cli(server.address, "bench", "--op", "stream", "--samples", "8192", "--count", "8")
        # Twice, more than a scrape apart: a series is born at its first request, so a rate (and
        # a quantile) needs a second one after Prometheus has seen the first.
        for _ in range(2):
            h.cli(server.address, "unwrap", "phase.npy", "--mask", "mask.npy", "--out", "u.npy")
            h.cli(server.address, "unwrap", "phase.npy", "--mask", "mask.npy", "--method", "lsq",
                  "--sync", "--out", "s.npy")
            h.cli(server.address, "hologram", "--image", "img.png", "--spacing", "32e-6",
                  "--depth", "0.1", "--size", "64x64", "--pitch", "8e-6", "--wavelength",
                  "532e-9", "--phase-png", "p.png")
            h.cli(server.address, "jobs", "get", "00000000000000000000000000000000@elsewhere",
                  expect=3)
            time.sleep(1.5)
        wait_for("the job to expire (fresnel_jobs_dropped_total)",
                 lambda: h.query("fresnel_jobs_dropped_total"), 15)
        # Two scrapes after the load, and the recording rules evaluated on them.
        wait_for("recording rules", lambda: h.query("fresnel:request_errors:ratio_rate5m"), 15)
        time.sleep(2)
        with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=5) as r:
            exported = set(re.findall(r"^(fresnel_\w+?)(?:_bucket|_sum|_count)?[{ ]",
                                      r.read().decode(), re.M))
        failures, skipped = [], []
        parse_only = 0
        for where, expr, needs_data in exprs:
            result = h.query(expr)  # fails the test if it does not parse
            if not needs_data:
                parse_only += 1
                continue
            metrics = set(re.findall(r"\b(fresnel_[a-z_]+?)(?:_bucket|_sum|_count)?\b", expr))
            absent = sorted(m for m in metrics if m not in exported)
            unexpected = [m for m in absent if m not in ABSENT_HERE]
            if unexpected:
                failures.append(f"{where}: fresneld exports no {', '.join(unexpected)}")
            elif absent:
                if result:
                    failures.append(f"{where}: data for {absent} that the server does not export?")
                skipped.append(f"{where}: parses; no data expected ({ABSENT_HERE[absent[0]]})")
            elif not result:
                failures.append(f"{where}: no data\n    {expr}")
            elif all(math.isnan(float(r["value"][1])) for r in result):
                failures.append(f"{where}: only NaN\n    {expr}")
        for s in skipped:
            print(f"  skipped data check: {s}")
        print(f"{len(exprs)} expressions: {len(exprs) - len(failures) - len(skipped) - parse_only} "
              f"returned data, {parse_only} alerts parsed (their quantities checked apart), "
              f"{len(skipped)} parse only without data, {len(failures)} failed "
              f"({time.monotonic() - start:.1f} s)")
        if failures:
            fail("\n  " + "\n  ".join(failures))


if __name__ == "__main__":
    main()
