"""Loopback harness for the deploy tests: real fresneld processes, a real Prometheus scraping them,
and the fresnel CLI. Everything listens on 127.0.0.1 only; every wait is bounded; every process
started here is stopped by Harness.close() (also on failure)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def wait_for(what, predicate, timeout_s, interval_s=0.2):
    """Polls predicate() until it returns a truthy value (returned) or timeout_s passes (fail)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


class Server:
    def __init__(self, proc, port, metrics_port, log_path):
        self.proc, self.port, self.metrics_port, self.log_path = proc, port, metrics_port, log_path

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_address(self):
        return f"127.0.0.1:{self.metrics_port}"

    def log(self):
        with open(self.log_path) as f:
            return f.read()


class Harness:
    def __init__(self, fresneld, fresnel, name):
        self.fresneld, self.fresnel = os.path.abspath(fresneld), os.path.abspath(fresnel)
        self.dir = tempfile.mkdtemp(prefix=f"fresnel-{name}-")
        self.procs = []
        self.prometheus_url = None

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start_fresneld(self, *args, env=None):
        port, metrics_port = free_port(), free_port()
        log_path = os.path.join(self.dir, f"fresneld-{port}.log")
        full_env = dict(os.environ, **(env or {}))
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [self.fresneld, "--listen", f"127.0.0.1:{port}", "--metrics",
                 f"127.0.0.1:{metrics_port}", "--gpus", "none", "--cpu-workers", "2", *args],
                stdout=log, stderr=subprocess.STDOUT, env=full_env)
        self.procs.append(proc)
        server = Server(proc, port, metrics_port, log_path)
        wait_for(f"fresneld on {server.address}",
                 lambda: proc.poll() is not None or "listening on port" in server.log(), 20)
        if proc.poll() is not None:
            fail(f"fresneld exited: {server.log()}")
        return server

    def cli(self, server, *args, expect=0):
        """Runs `fresnel --server SERVER ARGS`; returns (stdout, stderr); fails on another exit code."""
        result = subprocess.run([self.fresnel, "--server", server, "--timeout", "30", *args],
                                capture_output=True, text=True, timeout=120, cwd=self.dir)
        if result.returncode != expect:
            fail(f"fresnel {' '.join(args)} exited {result.returncode} (expected {expect}):\n"
                 f"{result.stdout}\n{result.stderr}")
        return result.stdout, result.stderr

    def start_prometheus(self, servers, template):
        """Prometheus from `template` (deploy/prometheus/prometheus-local.yml: job "fresnel" and the
        rules) with `servers` as its targets and every interval cut to one second; returns once it
        is ready and has scraped every target once."""
        port = free_port()
        with open(template) as f:
            config = yaml.safe_load(f)
        config["global"].update(scrape_interval="1s", evaluation_interval="1s", scrape_timeout="1s")
        config["rule_files"] = [os.path.join(os.path.dirname(os.path.abspath(template)), r)
                                for r in config.get("rule_files", [])]
        [job] = config["scrape_configs"]
        job["static_configs"] = [{"targets": [s.metrics_address for s in servers]}]
        config_path = os.path.join(self.dir, "prometheus.yml")
        with open(config_path, "w") as f:
            yaml.safe_dump(config, f)
        log = open(os.path.join(self.dir, "prometheus.log"), "w")
        proc = subprocess.Popen(
            ["prometheus", f"--config.file={config_path}",
             f"--storage.tsdb.path={os.path.join(self.dir, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        self.prometheus_url = f"http://127.0.0.1:{port}"

        def ready():
            if proc.poll() is not None:
                fail(f"prometheus exited: {open(log.name).read()}")
            try:
                return urllib.request.urlopen(self.prometheus_url + "/-/ready", timeout=1).status == 200
            except OSError:
                return False
        wait_for("prometheus ready", ready, 30)
        wait_for("a first scrape of every target",
                 lambda: len(self.query('up{job="fresnel"} == 1')) == len(servers), 20)

    def query(self, expr):
        """Instant query; returns the result list; fails when Prometheus rejects the expression."""
        url = self.prometheus_url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            body = json.load(urllib.request.urlopen(url, timeout=10))
        except urllib.error.HTTPError as e:
            body = json.load(e)
        if body.get("status") != "success":
            fail(f"Prometheus rejected {expr!r}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]["result"]

    def scraped_total(self, expr):
        """Sum of the values of an instant vector (0 when empty)."""
        return sum(float(r["value"][1]) for r in self.query(expr))
