#!/usr/bin/env python3
"""Checks on a run's records, read from `detnccl dump --format jsonl` (bench/gpu/run.sh uses it; standard library
only, so that it runs on the GPU machine as is).

    records.py fingerprints EXPECT DUMP   every line "seq op input output" of EXPECT (written by gpu_traced_job calls)
                                          has a call record with that seq and op whose fingerprints are equal ("-":
                                          the call has no such buffer, nothing to compare)
    records.py flag DUMP BIT              some call record has flag BIT set (64: captured, 8: deterministic)
    records.py steps DUMP N               the call records carry the steps 0..N-1 (the Python step helper's stamps)

Prints one line (the figure for run.sh's summary) and exits 0 when the check holds, 1 when not.
"""
import json
import sys


def calls(path):
    with open(path) as dump:
        return [r for r in (json.loads(line) for line in dump if line.strip()) if r.get("type") == "call"]


def check_fingerprints(expect_path, dump_path):
    records = {r["seq"]: r for r in calls(dump_path)}
    checked, problems = 0, []
    with open(expect_path) as expect:
        for line in expect:
            seq, op, wanted_in, wanted_out = line.split()
            record = records.get(int(seq))
            if record is None or record["op"] != op:
                problems.append(f"seq {seq}: no {op} record (found {record and record['op']})")
                continue
            for side, wanted in (("input", wanted_in), ("output", wanted_out)):
                got = record[f"{side}_fingerprint"]
                if wanted != "-" and got != wanted:
                    problems.append(f"seq {seq} {op} {side}: recorded {got}, CPU {wanted}")
            checked += 1
    if checked == 0:
        problems.append("no expected calls")
    for problem in problems[:10]:
        print(problem, file=sys.stderr)
    print(f"{checked} calls, {len(problems)} mismatches")
    return not problems


def check_flag(dump_path, bit):
    records = calls(dump_path)
    flagged = sum(1 for r in records if r["flags"] & bit)
    print(f"{flagged} of {len(records)} records with flag {bit}")
    return flagged > 0


def check_steps(dump_path, steps):
    seen = sorted({r["step"] for r in calls(dump_path)})
    missing = [s for s in range(steps) if s not in seen]
    print(f"steps {seen[0] if seen else '-'}..{seen[-1] if seen else '-'} ({len(seen)} distinct), {len(missing)} missing")
    return not missing


def main(argv):
    if len(argv) == 4 and argv[1] == "fingerprints":
        ok = check_fingerprints(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "flag":
        ok = check_flag(argv[2], int(argv[3]))
    elif len(argv) == 4 and argv[1] == "steps":
        ok = check_steps(argv[2], int(argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
