"""One value check, one message form (`cory_env.checks`): every general value check of the public API, from the env
to the maths, says ``{name}={value!r} is invalid: {fix}``; β >= 0 is checked by one function wherever it is
checked."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from cory_env.checks import MAX_MAGNITUDE, check_field, check_flag, check_number

FORM = r"^{name}={value} is invalid: "


@pytest.mark.parametrize(("call", "message"), [
    (lambda: check_number("1e3", "x"), "x='1e3' is invalid: use a number (got str); write it without quotes"),
    (lambda: check_number(True, "x", integer=True), "x=True is invalid: use an integer (got bool)"),
    (lambda: check_number(2.0, "x", integer=True), "x=2.0 is invalid: use an integer (got float)"),
    (lambda: check_number(float("nan"), "x", fix="see --help"), "x=nan is invalid: use a finite number; see --help"),
    (lambda: check_number(2e6, "x", bounded=True), f"x=2000000.0 is invalid: use a magnitude of at most "
                                                   f"{MAX_MAGNITUDE:g} (larger weights and rewards overflow a product "
                                                   "to inf)"),
    (lambda: check_number(0, "x", integer=True, low=1), "x=0 is invalid: use an integer >= 1"),
    (lambda: check_number(0.0, "x", above=0), "x=0.0 is invalid: use a value > 0"),
    (lambda: check_number(2, "x", high=1), "x=2 is invalid: use a value <= 1"),
    (lambda: check_number(1.0, "x", low=0, below=1), "x=1.0 is invalid: use a value in [0, 1)"),
    (lambda: check_number(0, "x", above=0, high=1), "x=0 is invalid: use a value in (0, 1]"),
    (lambda: check_flag("no", "x"), "x='no' is invalid: use True or False (got str)"),
    (lambda: check_field(False, "x", [1], "give two"), "x=[1] is invalid: give two"),
])
def test_the_checks_speak_one_form(call, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call()


def test_the_checks_return_the_value_and_an_int_of_any_size_is_finite():
    assert check_number(3, "x", integer=True, low=1) == 3 and check_flag(False, "x") is False
    assert check_number(10**400, "x", integer=True, low=1) == 10**400  # was an OverflowError from math.isfinite
    assert check_number(0.5, "x", low=0, below=1) == 0.5 and check_number(1, "x", above=0, high=1) == 1.0


def _calls():
    """(call, name, value): a general value check of each module, given a bad value."""
    from agents.reference import copy_for_agents
    from agents.sampling import SamplingConfig
    from agents.tiny import tiny_tokenizer
    from agents.value_head import ValueHead
    from cory_env import EnvConfig
    from cory_env.data import heldout_split
    from cory_env.rewards import collective_reward
    from cory_env.seating import Seating
    from cory_env.tasks.imdb import IMDBOptions
    from trainers.cli.eval import check_eval_numbers
    from trainers.config.parser import first_pass
    from trainers.evaluation.episodes import distinct_n
    from trainers.evaluation.passk import pass_at_k, pass_at_k_first
    from trainers.learning.grpo import group_advantages
    from trainers.learning.kl_control import AdaptiveKLController
    from trainers.learning.score_scaling import scale_scores
    from trainers.loop.role_exchange import RoleExchange

    eval_args = dict(num_samples=5, max_k=5, problems_per_batch=8, max_new_tokens=8, episodes=None, seed=None,
                     limit=None, torch_threads=0, eta=None)
    return [
        (lambda: EnvConfig(heldout_fraction=1.0), "heldout_fraction", "1.0"),
        (lambda: EnvConfig(max_new_tokens=3), "max_new_tokens", "3"),
        (lambda: heldout_split([{"query": "a"}], "train", -0.5), "heldout_fraction", "-0.5"),
        (lambda: IMDBOptions(query_min_tokens=5, query_max_tokens=3), "query_max_tokens", "3"),
        (lambda: Seating.chain(0), "n", "0"),
        (lambda: collective_reward([1.0], [1.0], coef=float("inf")), "coef", "inf"),
        (lambda: SamplingConfig(top_p=0.0), "top_p", "0.0"),
        (lambda: SamplingConfig(temperature=1e-9), "temperature", "1e-09"),
        (lambda: ValueHead(0), "hidden_size", "0"),
        (lambda: ValueHead(8, dropout=1.0), "dropout", "1.0"),
        (lambda: tiny_tokenizer(10), "vocab_size", "10"),
        (lambda: copy_for_agents(torch.nn.Linear(1, 1), 0), "n", "0"),
        (lambda: pass_at_k(3, 1, 4), "k", "4"),
        (lambda: pass_at_k_first([True], 2), "k", "2"),
        (lambda: distinct_n(["a b"], 0), "n", "0"),
        (lambda: check_eval_numbers(SimpleNamespace(**{**eval_args, "eta": -1.0})), "--eta", "-1.0"),
        (lambda: first_pass(["--num_processes", "0"]), "--num_processes", "'0'"),
        (lambda: RoleExchange([], [], period=-1), "role_exchange_period", "-1"),
        (lambda: group_advantages(torch.zeros(4), 1), "group_size", "1"),
        (lambda: scale_scores(torch.zeros(2), None, score_clip=0.0), "score_clip", "0.0"),
        (lambda: AdaptiveKLController(0.1, 6.0, 0.0), "horizon", "0.0"),
        (lambda: AdaptiveKLController(0.1, 6.0, 10.0).update(1.0, -1), "n_steps", "-1"),
    ]


def test_every_general_value_check_names_the_value_and_the_fix_in_one_form():
    """Before: three styles ("x must be >= 1, got 0", "x must be a finite number >= 0, got ...", "x=0 is invalid: ...")
    and ad-hoc ones ("need n >= 1, k >= 1, c >= 0; got ...", "--max_k 5 exceeds --num_samples 3")."""
    for call, name, value in _calls():
        with pytest.raises(ValueError, match=FORM.format(name=re.escape(name), value=re.escape(value))):
            call()


def test_beta_is_checked_by_one_function_in_one_form():
    """β >= 0 is the config's rule (`UpdateConfig`); the public KL controllers and `compute_rewards` keep theirs,
    each one `check_number` call: same words, and an infinite β (which `compute_rewards` took) is refused too."""
    from trainers.learning.configs import UpdateConfig
    from trainers.learning.kl_control import AdaptiveKLController, FixedKLController
    from trainers.learning.ppo_math import compute_rewards

    z, mask = torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool)
    for call, name in [(lambda b: UpdateConfig(init_kl_coef=b), "init_kl_coef"),
                       (lambda b: AdaptiveKLController(b, 6.0, 10.0), "init_kl_coef"),
                       (lambda b: FixedKLController(b), "kl_coef"),
                       (lambda b: compute_rewards(torch.zeros(2), z, z, mask, b), "kl_coef")]:
        with pytest.raises(ValueError, match=rf"^{name}=-0\.5 is invalid: use a value >= 0"):
            call(-0.5)
        with pytest.raises(ValueError, match=rf"^{name}=inf is invalid: use a finite number"):
            call(float("inf"))
