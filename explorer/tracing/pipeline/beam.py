"""BEAM's search as a record: the candidates tinygrad's beam_search timed for a kernel, by round, which it kept and why the others
were dropped (explorer.schema.BeamRecord, a kernel's `beam`)."""
from __future__ import annotations
from typing import TYPE_CHECKING
from explorer.clocks import default_method

if TYPE_CHECKING:
  from explorer.schema import BeamCandidate, BeamRecord, BeamRound  # types only: pydantic stays out of trace workers

MIN_PROGRESS_US = 0.01  # tinygrad's BEAM_MIN_PROGRESS default: a round must beat the last by this much, or the search ends

BEAM_RECORD_NOTE = ("each time is the least of up to 3 runs at BEAM's test size (its global size capped at 65,536 threads), BEAM's own measure; "
             "candidates whose code repeats an earlier one's, that fail to compile or need 1000x the least compute are not timed, as in "
             "tinygrad; a round keeps the `width` fastest, and the search ends when no candidate is faster by 0.01 us (BEAM_MIN_PROGRESS)")

def beam_record(timed: list[tuple[list[str], float]], width: int, chosen: list[str], device: str) -> BeamRecord:
  """kernels[i].beam (explorer.schema.BeamRecord) from what tinygrad's beam_search timed (tg.recording_beam): a candidate's round
  is its number of opts (each round adds one), and it was kept when a later round's candidate starts with its opts or it won."""
  by_round: dict[int, list[tuple[list[str], float]]] = {}
  for opts, t in timed: by_round.setdefault(len(opts), []).append((opts, t))
  def kept(opts: list[str]) -> bool:
    return opts == chosen[:len(opts)] or any(o[:len(opts)] == opts for o, _ in by_round.get(len(opts) + 1, []))
  last = max(by_round, default=0)
  def why(opts: list[str]) -> str | None:
    if kept(opts): return None
    if len(opts) == last: return f"the search ended: this round's best was not faster than the last round's by {MIN_PROGRESS_US} us"
    return f"slower than the {width} kept in its round"
  candidates: list[BeamCandidate] = [{"opts": o, "time_s": t, "round": len(o), "kept": kept(o), "why": why(o)} for o, t in timed]
  rounds: list[BeamRound] = [{"round": r, "timed": len(cs), "best_s": min(t for _, t in cs), "kept": sum(1 for o, _ in cs if kept(o))}
            for r, cs in sorted(by_round.items())]
  return {"width": width, "rounds": rounds, "candidates": candidates, "chosen": chosen, "path": [chosen[:i] for i in range(1, len(chosen) + 1)],
          "note": BEAM_RECORD_NOTE, "method": default_method(device)}  # BEAM times its candidates with tinygrad's own timer
