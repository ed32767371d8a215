#!/usr/bin/env python3
"""Context switches and CPU waits per completed saga, by process group, over a window of a running
saga benchmark.

    bench/context_switches.py [--threads] DB_URL [SECONDS]     (default 60; run it beside a saga benchmark)

Reads voluntary and nonvoluntary switches of every thread (/proc/PID/task/*/status), and its CPU
time and the time it was runnable but waited for a CPU (/proc/PID/task/*/schedstat), before and
after the window, and the sagas completed in it (DB_URL: the benchmark's database), and prints them
per saga for PostgreSQL, the broker, the engine, each example service and the benchmark's front end,
beside the machine's total (/proc/stat ctxt). Threads that start or end inside the window are
not counted in their group (the machine total still counts them). --threads breaks each group down
by thread name (/proc/PID/task/TID/comm, digits as N: sagaflow's threads are named sf-db-N,
sf-relay, sf-consumer, sf-io; librdkafka's rdk:...).
"""
import os
import re
import subprocess
import sys
import time


def group_of(comm, cmd):
    if comm == "postgres":
        return "postgres"
    if "kafka.Kafka" in cmd:
        return "broker"
    for name in ("sagaflow-order-service", "sagaflow-payment-service", "saga_bench"):
        if name in cmd:
            return name
    if comm == "sagaflow":
        return "engine"
    return "other"


def snapshot(by_thread):
    groups = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
            group = group_of(comm, cmd)
            counts = {}  # key: [voluntary, preempted, CPU ns, waited for a CPU ns]
            for task in os.listdir(f"/proc/{pid}/task"):
                status = open(f"/proc/{pid}/task/{task}/status").read()
                key = group
                if by_thread:
                    key = f"{group} {re.sub(r'[0-9]+', 'N', open(f'/proc/{pid}/task/{task}/comm').read().strip())}"
                c = counts.setdefault(key, [0, 0, 0, 0])
                c[0] += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
                c[1] += int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
                cpu, waited = open(f"/proc/{pid}/task/{task}/schedstat").read().split()[:2]
                c[2] += int(cpu)
                c[3] += int(waited)
        except (OSError, AttributeError, ValueError):
            continue  # the process or thread ended meanwhile
        for key, c in counts.items():
            total = groups.setdefault(key, [0, 0, 0, 0])
            for i, count in enumerate(c):
                total[i] += count
    machine = next(int(line.split()[1]) for line in open("/proc/stat") if line.startswith("ctxt "))
    return groups, machine


def completed(url):
    out = subprocess.check_output(["psql", url, "-Atc", "SELECT count(*) FROM saga_instance WHERE status = 'completed'"])
    return int(out.strip())


def main():
    args = sys.argv[1:]
    by_thread = "--threads" in args
    args = [a for a in args if a != "--threads"]
    if not args:
        sys.exit(__doc__)
    url, seconds = args[0], float(args[1]) if len(args) > 1 else 60.0
    before, machine_before, sagas_before = *snapshot(by_thread), completed(url)
    time.sleep(seconds)
    after, machine_after, sagas_after = *snapshot(by_thread), completed(url)
    sagas = sagas_after - sagas_before
    if sagas <= 0:
        sys.exit("no saga completed in the window: is a closed loop running against this database?")
    print(f"{sagas} sagas in {seconds:.0f} s; machine: {(machine_after - machine_before) / sagas:.1f} switches per saga")
    print(f"{'group':<44}{'voluntary':>10}{'preempted':>10}{'CPU ms':>10}{'waited ms':>10}  per saga")
    for group in sorted(after):
        if group in before:
            v, n, cpu, waited = ((a - b) / sagas for a, b in zip(after[group], before[group]))
            print(f"{group:<44}{v:>10.1f}{n:>10.1f}{cpu / 1e6:>10.3f}{waited / 1e6:>10.3f}")


if __name__ == "__main__":
    main()
