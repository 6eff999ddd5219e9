"""The machine's record of how far separate launches of one run land apart, kept across verifications.

A prediction of what verify-plan measures (the median of a few launches, each a round) is uncertain by how far a
launch's speed sits from another's (`pipesim.sim.spread.machine_cv`'s `between`). A profile reads that spread off
its own two launches: one degree of freedom, and on the development VM two launches sat 1-2% apart while the same
model's verifications landed 5-15% apart. A verification measures it far better: each candidate ran in every
round, so the spread of a candidate's round medians about their mean, pooled over the candidates
(`pipesim.analysis.stats.pooled_round_spread`), rests on (rounds - 1) x candidates degrees of freedom.

So verify-plan appends what it measured to this record, one JSON line per comparable verification: the machine
(host name, CPUs, device), the model (`model_key` of the profile's model description), the pooled log standard
deviation and its degrees of freedom. `plan` reads it back (`pooled_launch_spread`): the model's own
verifications on this machine when they rest on MIN_DOF degrees of freedom, else every model's on this machine,
else nothing (the profile's own launches then stand alone, as before the record existed).

The file is `PIPESIM_LAUNCH_HISTORY` when set, else ~/.cache/pipesim/launch_spread.jsonl. It is read bounded and
line by line: a line that is not a record is skipped (and counted), so a damaged record costs that record only.
Only the latest MAX_RECORDS are kept.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipesim.io.atomic import write_file
from pipesim.io.bounded import read_text

ENV = "PIPESIM_LAUNCH_HISTORY"
OFF = "none"  # --launch-history none: neither read nor written
MAX_BYTES = 1 << 20
MAX_RECORDS = 500
MIN_DOF = 10  # a verification of 6 candidates in 3 rounds gives 12
MAX_LOG_SD = 1.0  # a launch spread of e^1 - 1 = 172% is a broken measurement, not a machine's


def default_path() -> Path:
    """Where the record lives unless a flag says otherwise."""
    given = os.environ.get(ENV)
    return Path(given) if given else Path.home() / ".cache" / "pipesim" / "launch_spread.jsonl"


def resolve(flag: str | None) -> Path | None:
    """A --launch-history value: None for the default path, "none" for no record at all, else the path given."""
    if flag is None:
        return default_path()
    return None if flag == OFF else Path(flag)


def machine(device: str = "cpu") -> dict[str, Any]:
    """What a record is of: this host, its CPU count and the device the runs used."""
    return {"host": socket.gethostname(), "cpus": os.cpu_count() or 1, "device": device}


def model_key(model: Mapping[str, Any]) -> str:
    """One model description (a profile's `model`) as a short stable key; two profiles of one model share it."""
    text = json.dumps(model, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def relative_sd(log_sd: float) -> float:
    """A lognormal spread's log standard deviation as a relative standard deviation (what `machine_cv` takes)."""
    return math.sqrt(math.expm1(log_sd**2))


@dataclass(frozen=True)
class LaunchSpread:
    """A launch spread pooled over earlier verifications: the log standard deviation of a launch's median about
    its candidate's level (`log_sd`), the degrees of freedom it rests on, how many verifications gave it, and
    whose they were (`scope`: "model", this model's on this machine, or "machine", every model's)."""

    log_sd: float
    dof: int
    verifications: int
    scope: str

    @property
    def between(self) -> float:
        """The spread as a relative standard deviation."""
        return relative_sd(self.log_sd)

    def to_dict(self) -> dict[str, Any]:
        return {"log_sd": self.log_sd, "dof": self.dof, "verifications": self.verifications, "scope": self.scope}

    def line(self) -> str:
        whose = "this model's" if self.scope == "model" else "every model's"
        return (
            f"launches land {self.between:.1%} apart (one standard deviation), pooled over {whose} "
            f"{self.verifications} earlier verification{'s' * (self.verifications != 1)} on this machine "
            f"({self.dof} degrees of freedom)"
        )


def read_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The records of `path` and how many lines were not records; ([], 0) when the file does not exist. A path
    that is not a readable regular file, or one over MAX_BYTES, is a ValueError naming it."""
    if not path.exists() and not path.is_symlink():
        return [], 0
    text = read_text(path, MAX_BYTES, "launch history")
    records, skipped = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        if _valid(record):
            records.append(record)
        else:
            skipped += 1
    return records, skipped


def _valid(record: object) -> bool:
    if not isinstance(record, dict) or not isinstance(record.get("machine"), dict):
        return False
    log_sd, dof = record.get("log_sd"), record.get("dof")
    if isinstance(log_sd, bool) or not isinstance(log_sd, (int, float)) or not 0 <= log_sd <= MAX_LOG_SD:
        return False
    if isinstance(dof, bool) or not isinstance(dof, int) or not 1 <= dof <= 100_000:
        return False
    return isinstance(record.get("model"), str)


def append_record(path: Path, *, log_sd: float, dof: int, model: str, device: str = "cpu") -> None:
    """Add one verification's pooled launch spread to the record at `path` (kept to its latest MAX_RECORDS; the
    file is replaced whole, so a failure leaves the old record as it was)."""
    record = {
        "machine": machine(device),
        "model": model,
        "log_sd": float(log_sd),
        "dof": int(dof),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if not _valid(record):
        raise ValueError(f"not a launch spread to record: log_sd {log_sd!r}, dof {dof!r}")
    records, _ = read_records(path)
    kept = [*records, record][-MAX_RECORDS:]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept), path)


def pooled_launch_spread(records: list[dict[str, Any]], model: str, device: str = "cpu") -> LaunchSpread | None:
    """The launch spread of this machine's records: the model's own when they rest on MIN_DOF degrees of freedom,
    else every model's when those do, else None."""
    here = machine(device)
    mine = [r for r in records if r["machine"] == here]
    for scope, chosen in (("model", [r for r in mine if r["model"] == model]), ("machine", mine)):
        dof = sum(r["dof"] for r in chosen)
        if dof >= MIN_DOF:
            squares = sum(r["dof"] * r["log_sd"] ** 2 for r in chosen)
            return LaunchSpread(math.sqrt(squares / dof), dof, len(chosen), scope)
    return None
