#!/usr/bin/env python3
"""A stand-in for the gandiva command for the search tests: a cluster in a
JSON file ($FAKE_GANDIVA_STATE). Every `ls` advances each live job by 50
mini-batches; a job's metric is |lr - 0.2| + 1 / (mini-batches + 1),
reported every 10 mini-batches (as the examples do), with lr read from its
command's --lr (lr 0.15 reports 0.06 less, then fails at 150); it finishes
at 400. `ls --name PATTERN` lists the jobs whose name matches; with
$FAKE_GANDIVA_ARCHIVE set, a job is archived as it ends (as
gandiva-scheduler --keep-ended-jobs may do before the next `ls`): only
`show` finds it."""
import fnmatch
import json
import os
import re
import sys

path = os.environ["FAKE_GANDIVA_STATE"]
state = json.load(open(path)) if os.path.exists(path) else {"jobs": [],
                                                           "calls": []}
args = [a for a in sys.argv[1:]]
state["calls"].append(args)
cmd = args[0]


def info(j):
    progress = {"minibatches": str(j["mb"])}
    at = (j["mb"] // 10) * 10 - 1
    if j["mb"] >= 10 and j["lr"] < 1:
        bonus = 0.06 if j["lr"] == 0.15 else 0.0
        progress.update({"metric": abs(j["lr"] - 0.2) + 1 / (at + 2) - bonus,
                         "metricMinibatches": str(at),
                         "metricReports": str(j["mb"] // 10)})
    return {"id": str(j["id"]), "state": j["state"], "progress": progress}


if cmd == "submit":
    # Every spec file before the connection flags; all jobs or none.
    files = [a for a in args[1:] if a.endswith(".yaml")]
    texts = [open(f).read() for f in files]
    for text in texts:
        if "FAIL" in text or "--lr 0.666" in text:
            print("gandiva submit: field 'command': bad", file=sys.stderr)
            json.dump(state, open(path, "w"))
            sys.exit(1)
    for text in texts:
        names = re.findall(r"(?m)^name: (.*)$", text)
        assert len(names) == 1, text
        lr = float(re.search(r"--lr ([0-9.]+)", text).group(1))
        job = {"id": len(state["jobs"]) + 1, "name": names[0], "lr": lr,
               "mb": 0, "state": "RUNNING", "spec": text}
        state["jobs"].append(job)
        print(job["id"])
elif cmd == "ls":
    pattern = args[args.index("--name") + 1] if "--name" in args else "*"
    out = []
    for j in state["jobs"]:
        if j.get("archived") or not fnmatch.fnmatchcase(j["name"], pattern):
            continue
        if j["state"] == "RUNNING":
            j["mb"] = min(400, j["mb"] + 50)
            if j["mb"] >= 400:
                j["state"] = "FINISHED"
            elif j["lr"] == 0.15 and j["mb"] >= 150:
                j["state"] = "FAILED"  # a crash, after its best metric
        if j["state"] != "RUNNING" and os.environ.get("FAKE_GANDIVA_ARCHIVE"):
            j["archived"] = True  # ended and archived before it was listed
            continue
        out.append(info(j))
    print(json.dumps({"jobs": out}))
elif cmd == "show":
    job = [j for j in state["jobs"] if j["id"] == int(args[1])][0]
    print(json.dumps(dict(info(job), archived=bool(job.get("archived")))))
elif cmd == "kill":
    for j in state["jobs"]:
        if j["id"] == int(args[1]):
            j["state"] = "KILLED"
json.dump(state, open(path, "w"))
