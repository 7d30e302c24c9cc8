"""Judge a multi-GPU run: did N generation jobs run at the same time, each on its own GPU?

    python tools/gpu/multigpu_report.py --trace gpu_trace.jsonl --expect 2 [--gpus gpus.csv]
        [--apps nvsmi_apps.csv] --out multigpu_report.json

Evidence, strongest first: the UUID of the device each job's CUDA actually used (recorded in the job),
nvidia-smi's list of processes per GPU sampled during the run, and the GPU locks each job held with the
times it took and released them. Exits 1 unless N jobs ran at once at some moment, and no two jobs that ran
at the same time shared a GPU (a job beyond N must wait for a free GPU).

No rule does this: it judges how Snakemake scheduled the generate jobs onto GPUs, from outside the run.
"""

import argparse
import csv
import itertools
import json
import sys
from pathlib import Path


def read_csv(path):
    if not path or not Path(path).exists():
        return []
    with open(path) as handle:
        return [[cell.strip() for cell in row] for row in csv.reader(handle) if row]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--gpus", help="nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader")
    parser.add_argument("--apps", help="nvidia-smi --query-compute-apps=timestamp,pid,gpu_uuid,used_memory samples")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    jobs = [json.loads(line) for line in Path(args.trace).read_text().splitlines() if line.strip()]
    uuid_of_index = {row[0]: row[1] for row in read_csv(args.gpus) if len(row) >= 2}
    gpus_seen_for_pid = {}
    for row in read_csv(args.apps):
        if len(row) >= 3:
            gpus_seen_for_pid.setdefault(row[1], set()).add(row[2])

    start = min((job["claimed_at"] for job in jobs), default=0.0)
    rows = []
    for job in jobs:
        locked = job["devices"]
        rows.append(
            {
                "output": job.get("output"),
                "pid": job["pid"],
                "locked_gpu_index": locked,
                "locked_gpu_uuid": [uuid_of_index.get(index) for index in locked],
                "cuda_device_uuid": job.get("cuda_device_uuid"),
                "cuda_device_name": job.get("cuda_device_name"),
                "max_memory_allocated": job.get("max_memory_allocated"),
                "nvidia_smi_gpu_uuids": sorted(gpus_seen_for_pid.get(str(job["pid"]), [])),
                "start_s": round(job["claimed_at"] - start, 3),
                "end_s": round(job["released_at"] - start, 3),
            }
        )
    overlaps = {
        f"{a['output']} & {b['output']}": round(min(a["end_s"], b["end_s"]) - max(a["start_s"], b["start_s"]), 3)
        for a, b in itertools.combinations(rows, 2)
    }
    all_at_once = round(min((r["end_s"] for r in rows), default=0) - max((r["start_s"] for r in rows), default=0), 3)
    concurrent_pairs = [
        (a, b)
        for a, b in itertools.combinations(rows, 2)
        if min(a["end_s"], b["end_s"]) > max(a["start_s"], b["start_s"])
    ]
    events = sorted([(r["start_s"], 1) for r in rows] + [(r["end_s"], -1) for r in rows], key=lambda e: (e[0], e[1]))
    running, most_at_once = 0, 0
    for _, change in events:
        running += change
        most_at_once = max(most_at_once, running)
    checks = {
        "expected_jobs_ran": len(rows) >= args.expect,
        "n_jobs_ran_at_once": most_at_once == args.expect,
        "concurrent_jobs_on_distinct_locked_gpus": all(
            not set(a["locked_gpu_index"]) & set(b["locked_gpu_index"]) for a, b in concurrent_pairs
        ),
        "cuda_used_the_locked_gpu": (
            all(r["cuda_device_uuid"] and r["cuda_device_uuid"] in r["locked_gpu_uuid"] for r in rows)
            if uuid_of_index
            else None
        ),
        "concurrent_jobs_on_distinct_cuda_devices": (
            all(a["cuda_device_uuid"] != b["cuda_device_uuid"] for a, b in concurrent_pairs)
            if all(r["cuda_device_uuid"] for r in rows)
            else None
        ),
        "nvidia_smi_agrees": (
            all(r["nvidia_smi_gpu_uuids"] == [r["cuda_device_uuid"]] for r in rows)
            # None when nvidia-smi shows other pids (a container's pid namespace): no verdict either way
            if any(r["nvidia_smi_gpu_uuids"] for r in rows) and all(r["cuda_device_uuid"] for r in rows)
            else None
        ),
    }
    passed = all(value is not False for value in checks.values()) and checks["expected_jobs_ran"]
    report = {
        "passed": passed,
        "checks": checks,
        "most_jobs_at_once": most_at_once,
        "seconds_all_jobs_overlapped": all_at_once,
        "pairwise_overlap_seconds": overlaps,
        "jobs": rows,
    }
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
