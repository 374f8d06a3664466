"""What each exercise checks and how its points are earned: `exN.py` holds exercise N's
`CHECKS`, `observe` (run inside the sandboxed grading copy), `measure` (the stages the grader
runs itself) and `judge`; `exN_observe.py` is the sandboxed half where it is long. The
stages several exercises share are here too: `p4.py`/`p4_judge.py` (a P4 program compiled
and run on the golden corpus, and the verdicts), `live.py` (the Mininet transfer stage) and
`remote_core.py`/`core_server.py` (the student's endpoints served from the sandbox).
The grading engine that loads these by number is `grader/`.
"""
