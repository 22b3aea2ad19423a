#!/usr/bin/env python3
"""promtool on deploy/prometheus: check config (both configurations), check rules, test rules.
Debian's Prometheus is built without Kubernetes service discovery, so prometheus.yml is checked
with its kubernetes_sd_configs replaced by a static target; everything else in it (globals,
rule files, relabelling) is checked as written. Usage: check_prometheus.py SOURCE_DIR"""
import os
import subprocess
import sys
import tempfile

import yaml


def promtool(*args):
    result = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)
    print(result.stdout.strip())
    if result.returncode != 0:
        print(f"FAIL: promtool {' '.join(args)}:\n{result.stderr}")
        sys.exit(1)


def main():
    prom = os.path.join(os.path.abspath(sys.argv[1]), "deploy/prometheus")
    promtool("check", "config", os.path.join(prom, "prometheus-local.yml"))
    config = yaml.safe_load(open(os.path.join(prom, "prometheus.yml")))
    for job in config["scrape_configs"]:
        if job.pop("kubernetes_sd_configs", None) != [{"role": "pod"}]:
            print(f"FAIL: job {job['job_name']}: expected kubernetes_sd_configs [{{role: pod}}]")
            sys.exit(1)
        job["static_configs"] = [{"targets": ["127.0.0.1:9464"]}]
    config["rule_files"] = [os.path.join(prom, f) for f in config["rule_files"]]
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        yaml.safe_dump(config, f)
        f.flush()
        promtool("check", "config", f.name)
    promtool("check", "rules", os.path.join(prom, "rules/fresnel.rules.yml"))
    promtool("test", "rules", os.path.join(prom, "tests/fresnel.rules.test.yml"))


if __name__ == "__main__":
    main()
