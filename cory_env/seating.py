"""Seatings: the line-up of an episode as data (who acts in which order, who reads whom, who sees the query, how the
task rewards mix into each seat's reward).

A CORY episode is played by N seats in order. Seat k writes a response to its prompt; its prompt shows the query
(when it `Seat.sees_query`) and the responses of the earlier seats it `Seat.reads` (**knowledge transfer**,
generalised from CORY's one observer reading the pioneer). When the last seat's response ends, each seat's task
reward r_k = r(q, a_k) is computed and seat i is paid

    R_i = Σ_j M_ij · r_j          (R = M · r, M = `Seating.reward_matrix`, N × N)

CORY's **collective reward** is M = [[1, c], [c, 1]] (c = `EnvConfig.partner_reward_coef`: 1 cooperative, −1
competitive, 0 independent); the single-agent baseline is the 1 × 1 identity.

| constructor | seats | reads | M |
|---|---|---|---|
| `Seating.single_agent()` (spec ``"ppo"``, ``"chain:1"``) | ``pioneer`` | — | [[1]] |
| `Seating.cory()` (spec ``"cory"``, ``"chain:2"``) | ``pioneer``, ``observer`` | the observer reads the pioneer | 1 on the diagonal, c off it |
| `Seating.chain(n)` (spec ``"chain:N"``) | ``pioneer``, ``observer_1`` … ``observer_{N-1}`` | seat k reads seats < k (``reads="previous"``: seat k − 1 only) | 1 on the diagonal, c off it |

Options of every constructor: ``knowledge_transfer=False`` (no seat reads another: the paper's w/o KT ablation),
``private_query=True`` (only the first seat sees the query: the relay tasks), ``partner_reward_coef``. Any `Seating`
can also be written out seat by seat (seat names: `seat_names`).

**Prompts.** A seat's template is its own (`Seat.template`) or the task's template for what the seat sees
(`cory_env.tasks.Task`): ``pioneer_template`` (the query), ``observer_template`` (the query and the responses it
reads), ``response_only_template`` (the responses only: a private query), ``blank_template`` (neither). In a template
``{query}`` is the query, ``{response}`` the responses of every seat the seat reads (token ids concatenated in seat
order, each without its EOS), and ``{<seat name>}`` one read seat's response. A template must show exactly what its
seat sees: ``{query}`` if and only if it sees the query, and every seat it reads (through ``{response}`` or by name).

**Reward records.** Every row's data record reaches the task reward; from the second seat on it also carries
``"partner_response"`` (the text of the seat just before) and ``"partner_responses"`` (the texts of all earlier
seats, in order), whatever the seat reads: a task may pay a seat for what its partners answered (`tiny_vocab`).

Source: CORY (arXiv 2410.06101) §3 (two seats, knowledge transfer, collective reward); the N-seat chain generalises
it as sequential cooperative MARL (chain-of-agents workflows).

Example:
    >>> s = Seating.chain(3)
    >>> s.names, s.seat("observer_2").reads, s.reward_matrix[0]
    (('pioneer', 'observer_1', 'observer_2'), ('pioneer', 'observer_1'), (1.0, 1.0, 1.0))
    >>> rewards = Seating.cory(partner_reward_coef=-1.0).rewards([np.array([1.0]), np.array([0.5])])
    >>> rewards["pioneer"].tolist(), rewards["observer"].tolist()
    ([0.5], [-0.5])
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from cory_env.checks import check_flag, check_number
from cory_env.prompts import PLACEHOLDERS, PromptTemplate, parse_template

__all__ = ["MAX_SEATS", "PIONEER", "READS", "SEATS", "SEATING_SPECS", "Seat", "Seating", "canonical_seating_spec",
           "config_seating", "parse_seating_spec", "seat_names", "seating_of"]

#: The first seat's name in every built-in seating.
PIONEER = "pioneer"
#: Seat ids of the default two-seat (CORY) seating, in acting order (PettingZoo `possible_agents`).
SEATS = (PIONEER, "observer")
#: What the seats of a chain read: every earlier seat, or only the one just before.
READS = ("all", "previous")
#: Named seating specs (`EnvConfig.seating`, ``--seating``) and their number of seats; also ``chain:N``.
SEATING_SPECS = {"cory": 2, "ppo": 1}
#: Most seats of a seating. Each seat trains its own model copy (or LoRA adapter), and a chain's templates and
#: checks grow with N²: the bound turns a typo such as 100,000 seats into an error at once.
MAX_SEATS = 256
#: Names a seat may not take: the template placeholders and the episode's end phase.
RESERVED_NAMES = (*PLACEHOLDERS, "done")

_CHAIN = re.compile(r"chain:([0-9]+)")  # ASCII digits only: int() also reads other scripts' digits


def seat_names(n: int) -> tuple[str, ...]:
    """The seat names of the built-in N-seat seatings.

    >>> seat_names(1), seat_names(2), seat_names(4)
    (('pioneer',), ('pioneer', 'observer'), ('pioneer', 'observer_1', 'observer_2', 'observer_3'))
    """
    n = check_num_seats(n, "n")
    if n <= 2:
        return SEATS[:n]
    return (PIONEER, *(f"observer_{k}" for k in range(1, n)))


def parse_seating_spec(spec: str) -> int:
    """The number of seats of a seating spec: ``"cory"`` (2), ``"ppo"`` (1: the single-agent baseline) or
    ``"chain:N"`` (1 <= N <= `MAX_SEATS`).

    Raises:
        ValueError: anything else, naming the spec and the valid forms.
    """
    if not isinstance(spec, str):
        raise ValueError(f"seating must be a seating spec such as 'cory', got {spec!r} ({type(spec).__name__}); pass "
                         "a Seating object to the env as `seating=` instead")
    if spec in SEATING_SPECS:
        return SEATING_SPECS[spec]
    match = _CHAIN.fullmatch(spec)
    if match is None or not 1 <= int(match.group(1)) <= MAX_SEATS:
        raise ValueError(f"seating={spec!r} is not a seating spec; use 'cory' (pioneer + observer), 'ppo' (the pioneer "
                         f"alone: the single-agent baseline) or 'chain:N' with 1 <= N <= {MAX_SEATS} seats (e.g. "
                         "chain:3)")
    return int(match.group(1))


def canonical_seating_spec(spec: str | None) -> str | None:
    """`spec` in its one written form (``"chain:04"`` -> ``"chain:4"``; names and None as they are), so that two
    spellings of one seating compare equal (a run's config on --resume).

    Raises:
        ValueError: from `parse_seating_spec`.
    """
    if spec is None:
        return None
    n = parse_seating_spec(spec)
    return spec if spec in SEATING_SPECS else f"chain:{n}"


def check_num_seats(n, name: str) -> int:
    """`n` as an int in [1, `MAX_SEATS`] (any integral type, e.g. numpy's; not a bool).

    Raises:
        ValueError: naming `name`, the value and the range.
    """
    return check_number(n, name, integer=True, low=1, high=MAX_SEATS, fix="a number of seats")


@dataclass(frozen=True)
class Seat:
    """One seat of a `Seating`.

    Attributes:
        name: the agent id (PettingZoo `possible_agents` entry, metric scope, template placeholder): a Python
            identifier, not ``query``, ``response`` or ``done``.
        reads: names of the earlier seats whose responses its prompt shows (knowledge transfer); ``()`` reads none.
        sees_query: whether its prompt shows the query (False: the query is private to the seats that see it).
        template: its prompt template (placeholders: module docstring); None takes the task's template for what the
            seat sees.

    Raises:
        ValueError: a bad name, a seat listed twice in `reads`, or a template that does not show exactly what the
            seat sees (names the seat, the field and the fix).
    """

    name: str
    reads: tuple[str, ...] = ()
    sees_query: bool = True
    template: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier() or self.name in RESERVED_NAMES:
            raise ValueError(f"seat name {self.name!r} is invalid: use a Python identifier (it becomes an agent id, a "
                             f"metric scope and a template placeholder) other than {', '.join(RESERVED_NAMES)}")
        if isinstance(self.reads, str):
            raise ValueError(f"seat {self.name!r}: reads must be a sequence of seat names, got the string "
                             f"{self.reads!r}; write reads=({self.reads!r},)")
        object.__setattr__(self, "reads", tuple(self.reads))
        if len(set(self.reads)) != len(self.reads):
            raise ValueError(f"seat {self.name!r}: reads {self.reads} names a seat twice; list each read seat once")
        check_flag(self.sees_query, f"seat {self.name!r}: sees_query")
        if self.template is not None:
            check_template(self.template, self, field=f"seat {self.name!r} template")


def check_template(template: str, seat: Seat, *, field: str) -> None:
    """Raise `ValueError` unless `template` shows exactly what `seat` sees (the module docstring's **Prompts**);
    `field` names the template in the message (a task field or the seat's own template)."""
    used = {p for _, p in parse_template(template, required=(), name=field, extra=seat.reads) if p}
    what = f"seat {seat.name!r}"
    if seat.sees_query and "query" not in used:
        raise ValueError(f"{field} {template!r} has no {{query}}, but {what} sees the query (sees_query=True); add "
                         "{query}, or make the query private to the earlier seats (Seat(sees_query=False), "
                         "private_query=True)")
    if not seat.sees_query and "query" in used:
        raise ValueError(f"{field} {template!r} shows the {{query}}, which {what} does not see (sees_query=False); "
                         "remove {query}, or set sees_query=True")
    missing = [] if "response" in used else [s for s in seat.reads if s not in used]
    if missing:
        names = ", ".join("{" + s + "}" for s in missing)
        raise ValueError(f"{field} {template!r} lacks the placeholder(s) {names} (or {{response}}) that {what} "
                         f"needs: it reads {list(seat.reads)}; add them, or drop those seats from its reads")
    if not seat.reads and "response" in used:
        raise ValueError(f"{field} {template!r} shows a {{response}}, but {what} reads no seat (reads=()); remove "
                         "{response}, or let it read the earlier seats (knowledge transfer)")


@dataclass(frozen=True)
class Seating:
    """The ordered seats of an episode and how their task rewards mix (module docstring).

    Attributes:
        seats: the seats in acting order (1 <= N <= `MAX_SEATS`).
        reward_matrix: M, N rows of N floats: seat i is paid R_i = Σ_j M_ij · r_j. None: the collective reward
            (all ones).

    Raises:
        ValueError: no seat, a seat name used twice, a seat that reads a later (or unknown) seat, or a reward
            matrix that is not N × N of finite numbers; each message names the field and the fix.
    """

    seats: tuple[Seat, ...]
    reward_matrix: tuple[tuple[float, ...], ...] | None = field(default=None)

    def __post_init__(self) -> None:
        seats = tuple(self.seats)
        if not seats:
            raise ValueError("a seating needs at least one seat (N >= 1); use Seating.single_agent() for one")
        if len(seats) > MAX_SEATS:
            raise ValueError(f"a seating holds at most MAX_SEATS = {MAX_SEATS} seats, got {len(seats)}")
        bad = [s for s in seats if not isinstance(s, Seat)]
        if bad:
            raise ValueError(f"seats must be Seat objects, got {bad[0]!r}; write Seat('name', reads=(...))")
        object.__setattr__(self, "seats", seats)
        names = [s.name for s in seats]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ValueError(f"seat name(s) {doubled} used twice in seats {names}; give every seat its own name")
        for k, seat in enumerate(seats):
            for read in seat.reads:
                if read not in names:
                    raise ValueError(f"seat {seat.name!r} reads {read!r}, which is not a seat of this seating "
                                     f"({names}); fix its reads")
                if names.index(read) >= k:
                    when = "at" if read == seat.name else "after"
                    raise ValueError(f"seat {seat.name!r} reads {read!r}, which acts {when} its turn: a seat can read "
                                     "only earlier seats (seat k reads seats < k); reorder the seats or drop it from "
                                     "reads")
        n = len(seats)
        matrix = ((1.0,) * n,) * n if self.reward_matrix is None else self.reward_matrix
        if isinstance(matrix, (str, bytes)) or any(isinstance(row, (str, bytes)) for row in matrix):
            raise ValueError(f"reward_matrix must be N rows of N numbers, got {matrix!r} (text, not numbers)")
        try:
            rows = tuple(tuple(check_number(x, f"reward_matrix[{i}][{j}]", bounded=True) for j, x in enumerate(row))
                         for i, row in enumerate(matrix))
        except TypeError as exc:
            raise ValueError(f"reward_matrix must be N rows of N numbers, got {matrix!r}") from exc
        if len(rows) != n or any(len(row) != n for row in rows):
            shape = f"{len(rows)}×{'/'.join(str(len(r)) for r in rows) if rows else 0}"
            raise ValueError(f"reward_matrix is {shape}, expected N×N = {n}×{n} for {n} seat(s) {names} (row i: "
                             "the weights of the seats' task rewards in seat i's reward)")
        object.__setattr__(self, "reward_matrix", rows)

    # ----- constructors -----------------------------------------------------------------------------------------
    @classmethod
    def chain(cls, n: int, *, knowledge_transfer: bool = True, partner_reward_coef: float = 1.0,
              private_query: bool = False, reads: str = "all") -> Seating:
        """N seats in a chain (`seat_names`): seat k reads every earlier seat (``reads="all"``) or seat k − 1 only
        (``"previous"``); with ``knowledge_transfer=False`` none reads; with ``private_query`` only the first seat
        sees the query. M has 1 on the diagonal and `partner_reward_coef` elsewhere.

        Raises:
            ValueError: n not an int in [1, `MAX_SEATS`], an unknown `reads`, a flag that is not a bool, a coefficient
                that is not a finite number.
        """
        n = check_num_seats(n, "n")
        check_flag(knowledge_transfer, "knowledge_transfer")
        check_flag(private_query, "private_query")
        if reads not in READS:
            raise ValueError(f"reads must be one of {READS}, got {reads!r}")
        c = check_number(partner_reward_coef, "partner_reward_coef", bounded=True)
        names = seat_names(n)
        seats = []
        for k, name in enumerate(names):
            read = () if not knowledge_transfer or k == 0 else names[:k] if reads == "all" else (names[k - 1],)
            seats.append(Seat(name, reads=read, sees_query=k == 0 or not private_query))
        return cls(tuple(seats), tuple(tuple(1.0 if i == j else c for j in range(n)) for i in range(n)))

    @classmethod
    def cory(cls, *, knowledge_transfer: bool = True, partner_reward_coef: float = 1.0,
             private_query: bool = False) -> Seating:
        """CORY's two seats: the pioneer, then the observer reading it; R_i = r_i + c·r_j (docs/paper.md §1)."""
        return cls.chain(2, knowledge_transfer=knowledge_transfer, partner_reward_coef=partner_reward_coef,
                         private_query=private_query)

    @classmethod
    def single_agent(cls) -> Seating:
        """The pioneer alone, paid its own task reward (the single-agent baseline; inference)."""
        return cls.chain(1)

    @classmethod
    def from_spec(cls, spec: str, **options) -> Seating:
        """The chain of `parse_seating_spec`'s N seats with `chain`'s `options`."""
        return cls.chain(parse_seating_spec(spec), **options)

    # ----- reading ----------------------------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """Seat names in acting order."""
        return tuple(s.name for s in self.seats)

    @property
    def num_seats(self) -> int:
        """N."""
        return len(self.seats)

    @property
    def label(self) -> str:
        """A short name for logs: ``"ppo"`` (one seat), ``"cory"`` (two), ``"chain:N"`` for the built-in seat names
        (`seat_names`); ``"seats:a,b,..."`` for seats named otherwise."""
        if self.names != seat_names(self.num_seats):
            return "seats:" + ",".join(self.names)
        return {1: "ppo", 2: "cory"}.get(self.num_seats, f"chain:{self.num_seats}")

    @property
    def first(self) -> str:
        """The first seat's name (the one that answers alone at inference)."""
        return self.seats[0].name

    def seat(self, name: str) -> Seat:
        """The seat called `name`. Raises KeyError naming the seats."""
        for s in self.seats:
            if s.name == name:
                return s
        raise KeyError(f"no seat {name!r}; seats are {list(self.names)}")

    def describe(self) -> str:
        """One line: each seat with what it sees, then M (the trainer logs it at the start of a run).

        >>> Seating.chain(3, reads="previous", private_query=True, partner_reward_coef=0.5).describe()
        'pioneer(q) -> observer_1(pioneer) -> observer_2(observer_1); reward matrix [[1.0, 0.5, 0.5], [0.5, 1.0, 0.5], [0.5, 0.5, 1.0]]'
        """
        parts = []
        for s in self.seats:
            sees = (["q"] if s.sees_query else []) + list(s.reads)
            parts.append(f"{s.name}({'+'.join(sees) or 'nothing'})")
        return " -> ".join(parts) + f"; reward matrix {[list(r) for r in self.reward_matrix]}"

    # ----- prompts and rewards ----------------------------------------------------------------------------------
    def template_of(self, seat: Seat, task) -> tuple[str, str]:
        """(template, where it comes from) for `seat` on `task`: its own, else the task's template for what it sees.

        Raises:
            ValueError: the task has no template for that view (names the task field and the fix), or the
                template does not show what the seat sees (`check_template`).
        """
        if seat.template is not None:
            return seat.template, f"seat {seat.name!r} template"
        name = ("observer_template" if seat.reads else "pioneer_template") if seat.sees_query else \
            ("response_only_template" if seat.reads else "blank_template")
        template = getattr(task, name)
        if template is None:
            raise ValueError(f"task {task.name!r} has no {name} (the prompt of a seat that sees "
                             f"{'only the responses it reads' if seat.reads else 'neither the query nor a response'}"
                             f"), which seat {seat.name!r} needs; give the Task a {name}, or the seat its own "
                             "Seat(template=...)")
        check_template(template, seat, field=f"task {task.name!r} {name}")
        return template, name

    def check_task(self, task) -> None:
        """Raise `ValueError` if some seat has no valid template on `task` (`template_of`); needs no tokenizer, so
        it runs before any model loads."""
        for seat in self.seats:
            self.template_of(seat, task)

    def prompt_templates(self, task, tokenizer) -> dict[str, PromptTemplate]:
        """Seat name -> its `PromptTemplate` on `task`, tokenized with `tokenizer`."""
        out = {}
        for seat in self.seats:
            template, name = self.template_of(seat, task)
            out[seat.name] = PromptTemplate(template, tokenizer, required=(), reads=seat.reads, name=name)
        return out

    def rewards(self, task_rewards: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """Each seat's reward R = M · r, from `task_rewards`: N float arrays (B,), r_j of seat j in seat order.

        Returns:
            Seat name -> float64 (B,) (new arrays); R_i = Σ_j M_ij · r_j summed in seat order (two seats: exactly
            r_i + c·r_j).

        Raises:
            ValueError: not N arrays of one shape.
        """
        r = [np.asarray(x, dtype=np.float64) for x in task_rewards]
        if len(r) != self.num_seats or len({x.shape for x in r}) != 1:
            raise ValueError(f"expected {self.num_seats} task-reward arrays of one shape (B,), got "
                             f"{[x.shape for x in r]}")
        out = {}
        for name, row in zip(self.names, self.reward_matrix):
            total = row[0] * r[0]
            for weight, rj in zip(row[1:], r[1:]):
                total = total + weight * rj
            out[name] = total
        return out


def seating_of(seating: Seating | str | None, *, task, knowledge_transfer: bool = True,
               partner_reward_coef: float = 1.0) -> Seating:
    """The seating an env plays: a `Seating` as given; else the chain of the spec's N seats (None: the task's
    `num_seats`) with the task's `private_query` and `seat_reads`, and the config's knowledge transfer and partner
    coefficient (`EnvConfig.knowledge_transfer`, `EnvConfig.partner_reward_coef`).

    Raises:
        ValueError: a `Seating` with ``knowledge_transfer=False`` or a partner coefficient other than 1 (the seating
            already fixes who reads whom and M: they would be ignored); a bad spec (`parse_seating_spec`).
    """
    if isinstance(seating, Seating):
        if knowledge_transfer is not True or partner_reward_coef != 1.0:
            raise ValueError(f"knowledge_transfer={knowledge_transfer!r} and partner_reward_coef="
                             f"{partner_reward_coef!r} do nothing beside a Seating object, which fixes who reads whom "
                             "and the reward matrix; build the seating with them (e.g. Seating.cory("
                             "knowledge_transfer=False, partner_reward_coef=0.5)) or pass a spec string instead")
        return seating
    n = task.num_seats if seating is None else parse_seating_spec(seating)
    return Seating.chain(n, knowledge_transfer=knowledge_transfer, partner_reward_coef=partner_reward_coef,
                         private_query=task.private_query, reads=task.seat_reads)


def config_seating(config, task) -> Seating:
    """The seating an `EnvConfig` plays on `task` (`seating_of` with the config's seating spec, knowledge transfer and
    partner coefficient), checked against the task's templates (`Seating.check_task`): what a training run refuses
    before any model loads.

    Raises:
        ValueError: from `seating_of` or `Seating.check_task`.
    """
    seating = seating_of(config.seating, task=task, knowledge_transfer=config.knowledge_transfer,
                         partner_reward_coef=config.partner_reward_coef)
    seating.check_task(task)
    return seating
