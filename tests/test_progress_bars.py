"""ralm.progress: tqdm's bar in a terminal, whole lines at an interval in a log."""

import io

import pytest

from ralm.progress import log_interval, tqdm


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_whole_lines_not_carriage_returns(monkeypatch):
    monkeypatch.setenv("RALM_PROGRESS_INTERVAL", "3600")
    log = io.StringIO()
    for _ in tqdm(range(1000), desc="embed", file=log):
        pass
    lines = log.getvalue().split("\n")
    assert "\r" not in log.getvalue() and "\x1b" not in log.getvalue()
    # the start and the final state, then the closing newline: 1,000 updates make 2 lines
    assert len(lines) == 3 and lines[2] == ""
    assert lines[0].startswith("embed:   0%") and "0/1000" in lines[0]
    assert lines[1].startswith("embed: 100%") and "1000/1000" in lines[1]


def test_postfix_and_description_changes_wait_for_the_next_line(monkeypatch):
    # a training loop sets the loss every step; in a log that is no extra line (make demo wrote 200)
    monkeypatch.setenv("RALM_PROGRESS_INTERVAL", "3600")
    log = io.StringIO()
    bar = tqdm(total=200, desc="pretrain", file=log)
    for step in range(200):
        bar.update(1)
        bar.set_postfix(loss=f"{10 - step / 100:.3f}")
        bar.set_postfix_str(f"loss={10 - step / 100:.3f}")
        bar.set_description("pretrain")
    bar.close()
    lines = log.getvalue().split("\n")
    assert len(lines) == 3 and lines[1].startswith("pretrain: 100%") and lines[1].endswith("loss=8.010]")


def test_a_bar_that_does_not_stay_leaves_its_last_line(monkeypatch):
    monkeypatch.setenv("RALM_PROGRESS_INTERVAL", "3600")
    log = io.StringIO()
    bar = tqdm(total=10, desc="seed 1", file=log, leave=False)
    bar.update(10)
    bar.close()
    assert log.getvalue().count("\n") == 1 and log.getvalue().startswith("seed 1:   0%")


def test_a_terminal_keeps_tqdm_in_place_updates(monkeypatch):
    monkeypatch.setenv("RALM_PROGRESS_INTERVAL", "3600")
    term = _Terminal()
    for _ in tqdm(range(5), desc="w", file=term, mininterval=0):
        pass
    assert term.getvalue().startswith("\rw:   0%") and term.getvalue().count("\r") >= 2


def test_disabled_bars_write_nothing():
    log = io.StringIO()
    for _ in tqdm(range(5), file=log, disable=True):
        pass
    assert log.getvalue() == ""


@pytest.mark.parametrize(("raw", "want"), [("5", 5.0), ("0", 0.0), ("-1", 30.0), ("soon", 30.0)])
def test_interval_setting(monkeypatch, raw, want):
    monkeypatch.setenv("RALM_PROGRESS_INTERVAL", raw)
    assert log_interval() == want
