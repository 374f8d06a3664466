"""A failed live stage keeps its logs for the student (grader.livelogs): the tails of the
run's logs and a packet summary travel in the live check, land in the submission's
results/live/ and beside feedback.md, and the student's view points there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grader import feedback, livelogs
from grader.report import Check, Grade
from rubrics import live

LOGS = {"h0-agent.log": "agent ready\nwrite timed out\n", livelogs.PACKETS: "p0l0  1: 9/0",
        livelogs.NETWORK: "fabric up in 0.8 s"}


def failed_live(logs: dict[str, str] = LOGS) -> Grade:
    obs = {"started": True, "ok": False, "verified": False, "error": "not complete",
           "logs": logs}
    check = live.judge_transfer(obs, "soft", "live.transfer", 4, hint="look at the logs")
    return Grade(4, "alice", "soft", (Check("unit", "unit", 1, True), check))


def test_tail_keeps_the_end_from_a_line_start(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("".join(f"line {i}\n" for i in range(5000)))
    text = livelogs.tail(log, 100)
    assert text.endswith("line 4999\n") and text.startswith("line ")
    assert len(text) <= 100
    (tmp_path / "link.log").symlink_to(log)
    with pytest.raises(OSError):
        livelogs.tail(tmp_path / "link.log")


def test_a_reports_logs_are_bounded_to_plain_names():
    kept = livelogs.bounded({"../../etc/passwd": "x", "a/b": "x", "ok.log": "y" * 10**6,
                             ".hidden": "x", "n.log": 5, **{f"f{i}.log": "z" for i in range(99)}})
    assert "../../etc/passwd" not in kept and "a/b" not in kept and ".hidden" not in kept
    assert "n.log" not in kept
    assert len(kept["ok.log"]) == livelogs.LOG_TAIL_BYTES * 2
    assert len(kept) <= livelogs.MAX_FILES
    assert livelogs.bounded(["not", "a", "dict"]) == {}


def test_a_forged_log_cannot_break_writing_them(tmp_path):
    """A sandboxed run's report is the student's word: JSON's lone surrogate once made every
    later encode raise, after the class was graded and before its outputs were written."""
    kept = livelogs.bounded(json.loads('{"h0-agent.log": "x\\ud800y", "a.log\\n": "z"}'))
    assert list(kept) == ["h0-agent.log"]  # a name ending in a newline is not plain
    sub = tmp_path / "alice"
    sub.mkdir()
    where = livelogs.write_into(sub, kept)
    assert (where / "h0-agent.log").read_text() == "x?y"
    grade = failed_live(kept)
    feedback.write_all(tmp_path / "fb", [("alice", grade)], gradescope=False, after_due=False)
    assert (tmp_path / "fb" / "alice" / "live" / "h0-agent.log").exists()
    feedback.write_all(tmp_path / "fb", [("alice", failed_live({"b.log": "new"}))],
                       gradescope=False, after_due=False)
    assert sorted(p.name for p in (tmp_path / "fb" / "alice" / "live").iterdir()) == ["b.log"]


def test_the_live_check_carries_them_and_the_report_keeps_them():
    grade = failed_live()
    check = grade.checks[-1]
    assert not check.passed and dict(check.logs) == LOGS
    again = Check.from_dict(json.loads(json.dumps(grade.to_json()))["checks"][-1])
    assert again == check
    passed = live.judge_transfer({"started": True, "ok": True, "verified": True, "error": "",
                                  "logs": LOGS}, "soft", "live.transfer", 4, hint="")
    assert passed.passed and passed.logs == tuple(LOGS.items())  # kept, never pointed to


def test_the_students_view_points_to_them(tmp_path):
    grade = failed_live()
    text = feedback.student_text(grade)
    assert "logs: the live stage's log tails and packet counts are in results/live/" in text
    assert "write timed out" not in text  # the terminal gets the pointer, not the logs
    md = feedback.student_markdown(grade)
    assert "`live/` beside this file" in md
    scope = feedback.gradescope_results(grade)["tests"][-1]["output"]
    assert "--- h0-agent.log (end) ---\nagent ready\nwrite timed out" in scope  # inline there
    written = feedback.write_all(tmp_path / "fb", [("alice", grade)], gradescope=False,
                                 after_due=False)
    live_dir = tmp_path / "fb" / "alice" / "live"
    assert live_dir / "h0-agent.log" in written
    assert (live_dir / livelogs.PACKETS).read_text() == LOGS[livelogs.PACKETS]
    clean = Grade(4, "bob", "soft", (Check("unit", "unit", 1, True),))
    feedback.write_all(tmp_path / "fb", [("bob", clean)], gradescope=False, after_due=False)
    assert not (tmp_path / "fb" / "bob" / "live").exists()
    assert "logs:" not in feedback.student_text(clean)


def test_written_into_the_submission_replacing_the_last_run(tmp_path):
    sub = tmp_path / "alice"
    sub.mkdir()
    livelogs.write_into(sub, {"old.log": "old"})
    where = livelogs.write_into(sub, LOGS)
    assert where == sub / "results" / "live"
    assert sorted(p.name for p in where.iterdir()) == sorted(LOGS)
    assert (where / "h0-agent.log").read_text() == LOGS["h0-agent.log"]


def test_a_planted_link_is_refused_and_nothing_outside_is_written(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("keep")
    sub = tmp_path / "mallory"
    sub.mkdir()
    (sub / "results").symlink_to(outside)
    with pytest.raises(livelogs.LiveLogError, match="not a plain folder"):
        livelogs.write_into(sub, {"victim": "overwritten"})
    (sub / "results").unlink()
    (sub / "results" / "live").mkdir(parents=True)
    (sub / "results" / "live" / "victim").symlink_to(victim)
    with pytest.raises(OSError):
        livelogs.write_into(sub, {"victim": "overwritten"})
    assert victim.read_text() == "keep"
    (sub / "results" / "live" / "victim").unlink()
    os.link(victim, sub / "results" / "live" / "victim")
    with pytest.raises(livelogs.LiveLogError, match="not a plain file"):
        livelogs.write_into(sub, {"victim": "overwritten"})
    assert victim.read_text() == "keep"
    with pytest.raises(livelogs.LiveLogError, match="plain file name"):
        livelogs.write_into(tmp_path / "outside", {"../x": "y"})


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to the student needs root")
def test_the_student_owns_what_root_wrote(tmp_path):
    sub = tmp_path / "alice"
    sub.mkdir()
    os.chown(sub, 4242, 4242)
    where = livelogs.write_into(sub, LOGS)
    owners = {p.stat().st_uid for p in (sub / "results", where, *where.iterdir())}
    assert owners == {4242}
    livelogs.write_into(sub, LOGS)  # the next run writes over the student's own files
    other = sub / "results" / "live" / "h0-agent.log"
    os.chown(other, 777, 777)  # a file of a third user is not one to write into
    with pytest.raises(livelogs.LiveLogError):
        livelogs.write_into(sub, LOGS)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="Mininet needs root")
def test_a_failed_transfer_leaves_its_logs(tmp_path):
    """Switches with empty tables drop every frame: the write times out, and the logs say
    where the frames stopped (the first leaf consumed them)."""
    from controller.tables import SwitchTables, fabric_tables
    from fabric.topology import Fabric

    fabric = Fabric(**live.LIVE_FABRIC)
    empty = {n: SwitchTables(t.switch, (), (), ()) for n, t in fabric_tables(fabric).items()}
    obs = live.run_transfer("soft", empty, nbytes=64 * 1024, timeout_s=3.0)
    assert obs["started"] and not obs["ok"]
    logs = obs["logs"]
    assert {"h0-agent.log", "h1-agent.log", livelogs.NETWORK, livelogs.PACKETS} <= set(logs)
    assert all(s.name in logs[livelogs.PACKETS] for s in fabric.switches)
    consumed = [line for line in logs[livelogs.PACKETS].splitlines() if "consumed=" in line]
    assert max(int(line.split("consumed=")[1].split(",")[0]) for line in consumed) > 10
    check = live.judge_transfer(obs, "soft", "live.transfer", 4, hint="")
    where = livelogs.write_into(Path(tmp_path), dict(check.logs))
    assert (where / livelogs.PACKETS).read_text() == logs[livelogs.PACKETS]


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="Mininet needs root")
def test_a_fabric_that_fails_to_start_leaves_its_logs():
    """MrcNetwork.start() cleans up after itself on failure, which once deleted the logs
    with it: the live stage's own folder keeps them until they are read."""
    from controller.tables import SwitchTables, fabric_tables
    from fabric.topology import Fabric
    from p4rt.entities import TableEntry

    fabric = Fabric(**live.LIVE_FABRIC)
    bad = {n: SwitchTables(t.switch, (), (), (TableEntry("IngressPipeImpl.no_such_table", ()),))
           for n, t in fabric_tables(fabric).items()}
    obs = live.run_transfer("soft", bad, nbytes=16 * 1024, timeout_s=3.0)
    assert not obs["started"] and "no_such_table" in obs["error"], obs["error"]
    logs = obs["logs"]
    assert any(name.startswith("softswitch-") for name in logs), sorted(logs)
    assert "could not be read" in logs[livelogs.PACKETS]  # said, not hidden
    check = live.judge_transfer(obs, "soft", "live.transfer", 4, hint="")
    assert not check.passed and dict(check.logs) == logs
