"""The storage log of a traced step and what it adds up to: the peak, where it happened, the
breakdown at the peak, each part's own maximum over the step, and the peak of each phase.
Pure Python (no torch): the log is a list of allocations and frees in program order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: roles a storage can have, in report order
ROLES = ("inputs", "parameters", "gradients", "optimizer state", "activations",
         "recomputed activations", "autocast weight copies", "logits and loss",
         "backward temporaries", "optimizer temporaries", "other")


@dataclass(frozen=True)
class Place:
    """When and where an allocation happened: the step (0-based), the phase (setup, forward,
    backward, recompute, optimizer, zero_grad), the module path and the operator."""

    step: int
    phase: str
    module: str
    op: str


@dataclass
class StorageLog:
    """Allocations and frees in order. Storage `uid`s start at 1; event `+uid` allocates
    `sizes[uid]` bytes, `-uid` frees them. Roles can be set after the fact (gradients and
    optimizer state are recognised once the step has made them)."""

    sizes: list[int] = field(default_factory=lambda: [0])
    roles: list[str] = field(default_factory=lambda: [""])
    places: list[Place | None] = field(default_factory=lambda: [None])
    events: list[int] = field(default_factory=list)
    #: (index into events where the phase starts, step, phase)
    phases: list[tuple[int, int, str]] = field(default_factory=list)
    live_bytes: int = 0
    peak_bytes: int = 0
    #: number of events up to and including the allocation that set the peak
    peak_event: int = 0
    peak_place: Place | None = None

    def allocate(self, nbytes: int, role: str, place: Place) -> int:
        uid = len(self.sizes)
        self.sizes.append(nbytes)
        self.roles.append(role)
        self.places.append(place)
        self.events.append(uid)
        self.live_bytes += nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self.peak_event = len(self.events)
            self.peak_place = place
        return uid

    def reset_peak(self) -> None:
        """Start the peak afresh (at the traced step: earlier steps only built up its state)."""
        self.peak_bytes = self.live_bytes
        self.peak_event = len(self.events)
        self.peak_place = None

    def free(self, uid: int) -> None:
        self.events.append(-uid)
        self.live_bytes -= self.sizes[uid]

    def mark_phase(self, step: int, phase: str) -> None:
        self.phases.append((len(self.events), step, phase))


@dataclass(frozen=True)
class PhasePeak:
    step: int
    phase: str
    peak_bytes: int
    place: Place | None


@dataclass(frozen=True)
class Breakdown:
    """Bytes by role: at the step's peak, and each role's own maximum over the step."""

    at_peak_bytes: dict[str, int]
    max_over_step_bytes: dict[str, int]
    phase_peaks: list[PhasePeak]
    #: live bytes when the trace ended (persistent state: weights, optimizer state)
    end_bytes: int


def breakdown(log: StorageLog) -> Breakdown:
    """Replay the log once: live bytes by role at the peak, per-role maxima, per-phase peaks."""
    by_role = dict.fromkeys(ROLES, 0)
    max_role = dict.fromkeys(ROLES, 0)
    at_peak: dict[str, int] = {}
    phase_peaks: list[PhasePeak] = []
    live = 0
    current = -1  # index into log.phases of the phase the replay is in
    best, best_place = 0, None

    def close() -> None:
        if current >= 0:
            _, step, phase = log.phases[current]
            phase_peaks.append(PhasePeak(step, phase, best, best_place))

    for i, ev in enumerate(log.events):
        while current + 1 < len(log.phases) and log.phases[current + 1][0] <= i:
            close()
            current += 1
            best, best_place = live, None
        uid = abs(ev)
        role = log.roles[uid] if log.roles[uid] in by_role else "other"
        size = log.sizes[uid] if ev > 0 else -log.sizes[uid]
        live += size
        by_role[role] += size
        if size > 0:
            max_role[role] = max(max_role[role], by_role[role])
            if live > best:
                best, best_place = live, log.places[uid]
        if i + 1 == log.peak_event:
            at_peak = dict(by_role)
    close()
    for _, step, phase in log.phases[current + 1:]:  # phases that saw no event
        phase_peaks.append(PhasePeak(step, phase, live, None))
    return Breakdown(at_peak_bytes={k: v for k, v in at_peak.items() if v},
                     max_over_step_bytes={k: v for k, v in max_role.items() if v},
                     phase_peaks=phase_peaks, end_bytes=live)
