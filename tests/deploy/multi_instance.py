#!/usr/bin/env python3
"""Three fresneld on loopback ports behind one client address list, a real Prometheus scraping all
three: `fresnel bench` across the list spreads over all three (per-instance request counters, as
Prometheus sees them); one instance is killed; new work goes to the other two, and its job ids get
a clear NOT_FOUND (through the list) or UNAVAILABLE (directly) naming it. Then a second instance
drains (SIGTERM with work queued): clients' health checks take it out of the rotation, so new
work goes to the last one without a failure while the drained work still finishes.
Usage: multi_instance.py FRESNELD FRESNEL SOURCE_DIR"""
import array
import json
import os
import random
import signal
import struct
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Harness, fail, wait_for  # noqa: E402

COUNT = 'fresnel_request_duration_seconds_count{service="fresnel.v1.InterpolationService",method="ResamplePoly"}'


def per_instance(h, servers):
    """ResamplePoly requests per server, as Prometheus last scraped them."""
    by_target = {r["metric"]["instance"]: float(r["value"][1])
                 for r in h.query(f"sum by (instance) ({COUNT})")}
    return [by_target.get(s.metrics_address, 0.0) for s in servers]


def bench(h, target, seconds):
    out, _ = h.cli(target, "bench", "--op", "resample_poly", "--samples", "4096",
                   "--concurrency", "6", "--duration", str(seconds), "--json")
    result = json.loads(out)
    if result["requests_failed"] != 0:
        fail(f"bench across {target}: {result['requests_failed']} failed: {result['errors']}")
    return result["requests_ok"]


def write_random_phase(path, side):
    """A [side, side] float32 .npy of wrapped phase in [-pi, pi): work for a least-squares unwrap."""
    rng = random.Random(side)
    values = array.array("f", [rng.uniform(-3.14, 3.14) for _ in range(side * side)])
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (side, side)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        values.tofile(f)


def main():
    fresneld, fresnel, source = sys.argv[1:4]
    start = time.monotonic()
    with Harness(fresneld, fresnel, "multi") as h:
        # Instance names three ways: the flag, the environment, and the default HOSTNAME:PORT.
        servers = [h.start_fresneld("--instance", "fresnel-a"),
                   # The drained one: a drain timeout long enough for six 2048^2 unwraps on two
                   # loaded CI cores (the default 30 s was not, at load 12-15).
                   h.start_fresneld("--drain-timeout", "120", env={"FRESNEL_INSTANCE": "fresnel-b"}),
                   h.start_fresneld()]
        names = [json.loads(h.cli(s.address, "info", "--json")[0])["info"]["instance"]
                 for s in servers]
        expected = ["fresnel-a", "fresnel-b", f"{socket.gethostname()}:{servers[2].port}"]
        if names != expected:
            fail(f"ServerInfo.instance: {names}, expected {expected}")
        h.start_prometheus(servers, os.path.join(source, "deploy/prometheus/prometheus-local.yml"))
        everyone = ",".join(s.address for s in servers)
        out, _ = h.cli(everyone, "health")
        if out.strip() != "server SERVING":
            fail(f"fresnel health across the list: {out!r}")

        # 1. Load spreads over all three.
        ok = bench(h, everyone, 3)
        counts = wait_for("Prometheus to scrape the whole bench",
                          lambda: (lambda c: c if sum(c) >= ok else None)(per_instance(h, servers)), 10)
        print(f"bench across 3: {ok} requests; per instance {counts}")
        for name, n in zip(names, counts):
            if n < 0.1 * ok:
                fail(f"{name} served {n:.0f} of {ok} requests: round_robin did not spread the load")

        # 2. A job owned by the third instance, then that instance dies.
        victim = servers[2]
        for script, *args in (("make_demo_phase.py", "phase.npy", "mask.npy", "48", "64"),):
            subprocess.run([sys.executable, os.path.join(source, "scripts", script), *args],
                           cwd=h.dir, check=True, capture_output=True, timeout=60)
        out, _ = h.cli(victim.address, "unwrap", "phase.npy", "--mask", "mask.npy", "--out",
                       "u.npy", "--json")
        job_id = json.loads(out)["job_id"]
        if not job_id.endswith("@" + names[2]):
            fail(f"job id {job_id} does not name its instance {names[2]}")
        h.cli(victim.address, "jobs", "get", job_id)  # its owner knows it
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=10)
        wait_for("Prometheus to see the instance down",
                 lambda: h.query(f'up{{instance="{victim.metrics_address}"}} == 0'), 10)

        # 3. Its job: NOT_FOUND naming it through the list, UNAVAILABLE naming it directly.
        _, err = h.cli(everyone, "jobs", "get", job_id, expect=3)
        if "NOT_FOUND" not in err or f"belongs to instance {names[2]}" not in err:
            fail(f"jobs get {job_id} across the list: {err!r}")
        print(f"job of the killed instance, through the list: {err.strip()}")
        _, err = h.cli(victim.address, "jobs", "get", job_id, expect=3)
        if "UNAVAILABLE" not in err or victim.address not in err:
            fail(f"jobs get {job_id} at {victim.address}: {err!r}")
        print(f"the same, at its address: {err.strip().splitlines()[0]}")

        # 4. New work goes to the two that are left, without failures.
        before = per_instance(h, servers)
        ok = bench(h, everyone, 2)
        after = wait_for("Prometheus to scrape the second bench",
                         lambda: (lambda c: c if sum(c[:2]) - sum(before[:2]) >= ok else None)(
                             per_instance(h, servers)), 10)
        gained = [a - b for a, b in zip(after, before)]
        print(f"bench across 3 with one dead: {ok} requests; gained per instance {gained}")
        for name, g in zip(names[:2], gained[:2]):
            if g < 0.1 * ok:
                fail(f"{name} gained {g:.0f} of {ok} requests after the kill")
        if gained[2] != 0:
            fail(f"the killed instance's counter moved: {gained[2]}")

        # 5. The second instance drains with six unwraps accepted (two workers: four wait).
        draining = servers[1]
        write_random_phase(os.path.join(h.dir, "big.npy"), 2048)
        unwraps = [subprocess.Popen([h.fresnel, "--server", draining.address, "unwrap", "big.npy",
                                     "--method", "lsq", "--sync", "--out", f"big{i}.npy"],
                                    cwd=h.dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True) for i in range(6)]
        def accepted():
            stats = json.loads(h.cli(draining.address, "info", "--stats", "--json")[0])["stats"]
            return sum(d.get("queued", 0) + d.get("running", 0) for d in stats["devices"]) == len(unwraps)
        wait_for("every unwrap to be accepted", accepted, 20, interval_s=0.05)
        draining.proc.send_signal(signal.SIGTERM)
        wait_for("the drain to start", lambda: "draining" in draining.log(), 5, interval_s=0.05)
        before = per_instance(h, servers)
        ok = bench(h, everyone, 1)
        if "all accepted work finished" in draining.log():
            fail("the drain ended before the bench did: nothing was tested (make the unwraps larger)")
        after = wait_for("Prometheus to scrape the third bench",
                         lambda: (lambda c: c if c[0] - before[0] >= ok else None)(per_instance(h, servers)), 10)
        print(f"bench while {names[1]} drains: {ok} requests, all on {names[0]} "
              f"(+{after[0] - before[0]:.0f})")
        for i, p in enumerate(unwraps):
            _, err = p.communicate(timeout=150)
            if p.returncode != 0:
                fail(f"unwrap {i} accepted before the drain failed: {err}")
        draining.proc.wait(timeout=30)
        if draining.proc.returncode != 0 or "all accepted work finished" not in draining.log():
            fail(f"the drained instance: exit {draining.proc.returncode}, log {draining.log()!r}")
    print(f"multi-instance check passed ({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main()
