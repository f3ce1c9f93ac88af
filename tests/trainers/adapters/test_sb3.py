"""Stable-Baselines3 on the Gymnasium views: SB3's `check_env`, MaskablePPO with the action mask, PPO/A2C without."""

from __future__ import annotations

import logging

import gymnasium
import numpy as np
import pytest
import torch

pytest.importorskip("sb3_contrib")

from sb3_contrib import MaskablePPO  # noqa: E402
from stable_baselines3 import A2C, PPO  # noqa: E402
from stable_baselines3.common.env_checker import check_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

import cory_env  # noqa: E402,F401  (registers the ids)
from cory_env.tasks.tiny_vocab import SYMBOLS, VOCAB  # noqa: E402
from trainers.adapters.sb3 import TokenEmbedding, evaluate, make_env, make_model, train_and_evaluate  # noqa: E402

POLICY_KWARGS = {"features_extractor_class": TokenEmbedding, "net_arch": [16]}


def _params(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.policy.parameters()]


def _changed(before, model) -> bool:
    return any(not torch.equal(b, p) for b, p in zip(before, model.policy.parameters()))


def test_sb3_check_env_passes_on_tiny_vocab():
    env = gymnasium.make("cory/TinyVocab-v0")
    check_env(env.unwrapped, warn=True, skip_render_check=True)
    check_env(env, warn=True, skip_render_check=True)  # through Gymnasium's wrappers too


@pytest.mark.parametrize("seats", [1, 2, 3, 4])
def test_sb3_check_env_passes_for_the_pioneer_of_n_seats(seats):
    """The pioneer of any seating (the later seats played by the partner policy) is a valid SB3 env."""
    env = gymnasium.make("cory/TinyVocab-v0", seating=f"chain:{seats}")
    check_env(env.unwrapped, warn=True, skip_render_check=True)
    assert env.unwrapped.seating.num_seats == seats


def test_maskable_ppo_trains_the_pioneer_with_a_partner():
    result = train_and_evaluate(0, episodes=64, eval_episodes=8, num_evals=1, num_envs=2, n_steps=16,
                                batch_size=32, n_epochs=1, seating="cory")
    assert 0.0 <= result["after"] <= 2.0 and result["episodes"] > 0  # the pioneer's seat reward: r1 + r2


def test_sb3_check_env_passes_on_pioneer_with_another_tokenizer(tiny_tok):
    env = gymnasium.make("cory/Pioneer-v0", tokenizer=tiny_tok, task="imdb", context_len=16, min_new_tokens=2,
                         max_new_tokens=3)
    check_env(env.unwrapped, warn=True, skip_render_check=True)


def test_make_vec_env_builds_the_gymnasium_views():
    """SB3's make_vec_env passes render_mode="rgb_array" and falls back without it only on TypeError;
    the views refused it with a plain ValueError."""
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env("cory/TinyVocab-v0", n_envs=4, seed=0)
    obs = venv.reset()
    assert obs["input_ids"].shape[0] == 4 and venv.num_envs == 4
    model = MaskablePPO("MultiInputPolicy", venv, n_steps=16, batch_size=64, n_epochs=1, seed=0, device="cpu",
                        policy_kwargs=POLICY_KWARGS)
    before = _params(model)
    model.learn(total_timesteps=64)
    assert _changed(before, model)


def test_maskable_ppo_trains_and_only_samples_allowed_tokens():
    venv = DummyVecEnv([lambda: gymnasium.make("cory/TinyVocab-v0") for _ in range(2)])
    model = MaskablePPO("MultiInputPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu",
                        policy_kwargs=POLICY_KWARGS)
    before = _params(model)
    model.learn(total_timesteps=64)
    assert _changed(before, model)
    allowed = {VOCAB[s] for s in SYMBOLS} | {VOCAB["<eos>"]}
    env = gymnasium.make("cory/TinyVocab-v0")
    obs, _ = env.reset(seed=1)
    mask = env.unwrapped.action_masks()
    assert mask.dtype == bool and set(np.flatnonzero(mask)) == allowed
    actions = {int(model.predict(obs, deterministic=False, action_masks=mask)[0]) for _ in range(50)}
    assert actions <= allowed


def test_maskable_ppo_on_pioneer_with_a_larger_vocabulary(tiny_tok):
    venv = DummyVecEnv([lambda: gymnasium.make("cory/Pioneer-v0", tokenizer=tiny_tok, task="imdb", context_len=16,
                                               min_new_tokens=2, max_new_tokens=3)])
    model = MaskablePPO("MultiInputPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu",
                        policy_kwargs=POLICY_KWARGS)
    before = _params(model)
    model.learn(total_timesteps=16)
    assert _changed(before, model) and model.policy.action_net.out_features == len(tiny_tok)


@pytest.mark.parametrize("algo", [PPO, A2C])
def test_plain_ppo_and_a2c_train_without_the_mask(algo):
    venv = DummyVecEnv([lambda: gymnasium.make("cory/TinyVocab-v0")])
    kwargs = {"batch_size": 16, "n_epochs": 1} if algo is PPO else {}
    model = algo("MultiInputPolicy", venv, n_steps=16, seed=0, device="cpu", policy_kwargs=POLICY_KWARGS, **kwargs)
    before = _params(model)
    model.learn(total_timesteps=32)
    assert _changed(before, model)


def test_token_embedding_treats_ids_as_tokens_not_magnitudes():
    space = gymnasium.make("cory/TinyVocab-v0").observation_space
    extractor = TokenEmbedding(space, embed_dim=4)
    assert extractor.features_dim == 12 * 4 and extractor.embed.num_embeddings == 21  # V + padding id
    ids = torch.tensor([[5.0] * 12])
    padded = extractor({"input_ids": ids, "attention_mask": torch.zeros(1, 12)})
    torch.testing.assert_close(padded, extractor.embed.weight[20].repeat(12).unsqueeze(0))
    with pytest.raises(ValueError, match="input_ids"):
        TokenEmbedding(gymnasium.spaces.Dict({"x": gymnasium.spaces.Box(0, 1, (3,))}))


def test_train_and_evaluate_contract_and_determinism():
    torch.set_num_threads(1)
    result = train_and_evaluate(0, episodes=300, eval_episodes=16, num_evals=2, num_envs=2, n_steps=32,
                                batch_size=32, n_epochs=1)
    assert set(result) >= {"before", "after", "episodes", "curve"}
    assert 0 < result["episodes"] <= 300 and result["curve"][0][0] == 0
    assert result["curve"][-1] == [result["episodes"], result["after"]]
    assert all(0.0 <= r <= 1.0 for _, r in result["curve"])
    again = train_and_evaluate(0, episodes=300, eval_episodes=16, num_evals=2, num_envs=2, n_steps=32,
                               batch_size=32, n_epochs=1)
    assert again["curve"] == result["curve"]
    with pytest.raises(ValueError, match="episodes"):
        train_and_evaluate(0, episodes=0)
    with pytest.raises(ValueError, match="smaller than one rollout"):
        train_and_evaluate(0, episodes=100)  # default rollout: 8 envs x 64 steps


def test_training_leaves_no_folder_in_the_temp_directory(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    train_and_evaluate(0, episodes=128, eval_episodes=4, num_evals=2, num_envs=2, n_steps=32, batch_size=32, n_epochs=1)
    assert list(tmp_path.iterdir()) == []


def test_evaluate_is_seeded_and_leaves_the_global_rng_alone():
    model = MaskablePPO("MultiInputPolicy", DummyVecEnv([lambda: gymnasium.make("cory/TinyVocab-v0")]), seed=0,
                        device="cpu", policy_kwargs=POLICY_KWARGS)
    torch.manual_seed(7)
    expected = torch.rand(1)
    torch.manual_seed(7)
    first = evaluate(model, 8, seed=123)
    assert torch.equal(torch.rand(1), expected)
    assert evaluate(model, 8, seed=123) == first


def _best_reward(seating) -> float:
    """The pioneer's best seat reward: its task reward plus each partner's (collective reward, c = 1)."""
    return 1.0 if seating is None else float(seating.split(":")[1])


@pytest.mark.parametrize(("seating", "window"), [(None, 12), ("chain:4", 14), ("chain:6", 18)])
def test_make_env_window_grows_with_the_seats(caplog, seating, window):
    """The pioneer's env holds every partner's prompt too: chain:4 used to cut every query to 2 of its 4 symbols (a
    warning) and chain:6 was refused ("context_len=12 is too small")."""
    torch.set_num_threads(1)
    with caplog.at_level(logging.WARNING, logger="cory_env.episode"):
        assert make_env(seating).observation_space["input_ids"].shape == (window,)
        model = make_model(0, num_envs=1, n_steps=16, batch_size=16, n_epochs=1, seating=seating)
        before = _params(model)
        model.learn(total_timesteps=16)
        assert _changed(before, model) and 0.0 <= evaluate(model, 2, seed=1, seating=seating) <= _best_reward(seating)
    assert not [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]


def test_make_model_and_evaluate_on_another_window():
    torch.set_num_threads(1)
    model = make_model(0, num_envs=1, n_steps=16, batch_size=16, n_epochs=1, context_len=16)
    assert model.observation_space["input_ids"].shape == (16,) and model.policy.features_extractor.features_dim == 256
    before = _params(model)
    model.learn(total_timesteps=16)
    assert _changed(before, model) and 0.0 <= evaluate(model, 2, seed=1) <= 1.0  # evaluate reads the model's window
