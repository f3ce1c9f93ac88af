"""Atomic, resumable checkpoints of a CORY (or PPO baseline) run.

Layout of `<output_dir>/checkpoints/iter-000010/` (iteration 10 done):

```
trainer_state.json          format, iteration, seat assignment, config, the models, inputs' fingerprints (last)
rng.pt                      torch RNG state (loaded with weights_only=True)
llm1/trainable.safetensors  the bundle's trainable tensors (full model, or its LoRA adapter) + value head
llm1/learner.pt             optimizer state (weights_only=True)
llm1/learner.json           KL controller and score statistics
llm2/...
```

Crash safety: a checkpoint is written into a temporary folder, every file is flushed to disk (`os.fsync`), the folder
is renamed into place (`os.replace`), then the `latest` pointer file is replaced the same way. A crash, a kill or a
full disk mid-write therefore leaves the previous checkpoint and `latest` untouched; a failed write removes its
temporary folder, and a temporary folder left by a killed process is removed by the next save. When `latest` is
missing or points nowhere, `latest_checkpoint` falls back to the newest complete `iter-*` folder. A model whose
trainable tensors hold NaN/inf is never written (`refuse_nonfinite`), so `latest` always holds finite weights.

Loading: `load_checkpoint` restores a whole run for ``--resume``; `load_agent` one model's trained weights for inference
(`cory eval`); `read_learner_state` a model's KL controller and score statistics without a model.

Safe loading: only safetensors and `torch.load(weights_only=True)` are used to read, so a checkpoint cannot execute
code; anything else (a pickle with a code-running payload, a torn or foreign file) raises `CheckpointError`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from trainers.distributed import full_tensor
from trainers.learning.update import NonFiniteLossError, first_nonfinite
from trainers.loop.sharding import full_state, shard_like, sharded_optimizer_state
from cory_env.write_errors import write_errors

logger = logging.getLogger(__name__)

#: The layout of ``trainer_state.json`` this version writes and reads (`read_trainer_state`): the run's models under
#: ``models``, the role-exchange state, ``evaluated``, ``run_id`` and ``seed``; another one is refused naming it.
FORMAT = 2
#: The last commit whose cory reads a checkpoint without a format number (format 1), for the refusal's message.
FORMAT_1_COMMIT = "ec5be2f"
CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"
STATE_FILE = "trainer_state.json"
_TMP_PREFIX = ".tmp-"
#: What `save_checkpoint` writes into a checkpoint folder (the module docstring's layout): its own files, and in
#: each model's folder `MODEL_FILES`.
CHECKPOINT_FILES = (STATE_FILE, "rng.pt")
MODEL_FILES = ("trainable.safetensors", "learner.pt", "learner.json")


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, unsafe, or does not match the run it is loaded into.

    A `ValueError` (bad input), so `cory` reports it as a one-line error with exit status 2.
    """


def trainable_state(agent) -> dict[str, torch.Tensor]:
    """The agent's trainable tensors by parameter name (shared tensors once), contiguous CPU copies; FSDP2 shards
    are gathered whole (`trainers.loop.sharding.full_tensor`: a collective, so every process calls it)."""
    params = dict(agent.named_parameters())
    return {name: full_tensor(params[name].detach()).to("cpu").contiguous().clone()
            for name in trainable_state_names(agent)}


def trainable_state_names(agent) -> list[str]:
    """Names of the agent's trainable parameters (`agent.trainable_parameters()`), each tensor once."""
    wanted = {id(p) for p in agent.trainable_parameters()}
    names, seen = [], set()
    for name, param in agent.named_parameters():
        if id(param) in wanted and id(param) not in seen:
            seen.add(id(param))
            names.append(name)
    return names


def load_trainable_state(agent, state: dict[str, torch.Tensor], *, where: str) -> None:
    """Copy `state` into the agent's trainable parameters in place (nothing is copied unless all of it fits); an
    FSDP2-sharded parameter takes its shard of the whole tensor (`trainers.loop.sharding.shard_like`).

    Raises:
        CheckpointError: if names, shapes or dtypes differ (a checkpoint of another model or vocabulary).
    """
    params = dict(agent.named_parameters())
    own = set(trainable_state_names(agent))
    missing, unexpected = own - set(state), set(state) - own
    if missing or unexpected:
        raise CheckpointError(f"{where} does not match this model: missing {sorted(missing)[:5]}, unexpected "
                              f"{sorted(unexpected)[:5]}; was it written by a run with another model or use_lora "
                              "setting?")
    for name, tensor in state.items():
        if params[name].shape != tensor.shape:
            raise CheckpointError(f"{where}: parameter {name} has shape {tuple(tensor.shape)} in the checkpoint but "
                                  f"{tuple(params[name].shape)} in the model (another model or vocabulary?)")
        if not tensor.dtype.is_floating_point:
            raise CheckpointError(f"{where}: parameter {name} has dtype {tensor.dtype} in the checkpoint; "
                                  "expected floating-point weights")
    with torch.no_grad():
        for name, tensor in state.items():
            params[name].copy_(shard_like(tensor, params[name]))


def _fsync(path: Path) -> None:
    """Flush a file or a folder entry to disk (folders: best effort, not supported everywhere)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if path.is_dir():
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not path.is_dir():
            raise
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*"), reverse=True):  # files before the folders holding them
        _fsync(path)
    _fsync(folder)


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True), encoding="utf-8")


def _remove_stale_temps(root: Path) -> None:
    """Delete temporary folders/files left by a writer that was killed (one writer per run directory)."""
    for path in root.glob(f"{_TMP_PREFIX}*"):
        logger.warning("removing %s, left by an interrupted checkpoint write", path)
        shutil.rmtree(path, ignore_errors=True)
    (root / f".{LATEST}.tmp").unlink(missing_ok=True)


#: The name of a checkpoint folder (`checkpoint_path`): ``iter-`` and six digits, nothing else (a user's
#: ``iter-000010-best`` copy is not one, so rotation never deletes it).
CHECKPOINT_NAME = "iter-[0-9][0-9][0-9][0-9][0-9][0-9]"


def checkpoint_folders(root: str | os.PathLike) -> list[Path]:
    """The checkpoint folders in a run's ``checkpoints/`` folder `root` (named `CHECKPOINT_NAME`), oldest first."""
    return sorted(p for p in Path(root).glob(CHECKPOINT_NAME) if p.is_dir() and not p.is_symlink())


def checkpoint_path(output_dir: str | os.PathLike, iteration: int) -> Path:
    """Where `save_checkpoint` puts the checkpoint of `iteration`: ``output_dir/checkpoints/iter-NNNNNN``."""
    return Path(output_dir) / CHECKPOINT_DIR / f"iter-{iteration:06d}"


def bundle_states(bundles: dict, *, keep: bool = True) -> Iterator[tuple[str, dict[str, torch.Tensor], dict]]:
    """(name, trainable tensors, learner state) of each bundle in turn, what `save_checkpoint` writes.

    Lazy, one bundle at a time, so at most one model's state is held in memory. With FSDP2 shards every process
    must run through it in step (each gathered tensor is a collective); `keep=False` (the processes that write
    nothing) gathers and drops.
    """
    for name, bundle in bundles.items():
        tensors = trainable_state(bundle.agent)
        learner_state = full_state(bundle.learner.state_dict())  # a frozen snapshot's is empty
        yield (name, tensors, learner_state) if keep else (name, {}, {})


def refuse_nonfinite(name: str, tensors: dict[str, torch.Tensor], checkpoint: Path,
                     output_dir: str | os.PathLike) -> None:
    """Refuse to write model `name`'s `tensors` into `checkpoint` if one holds a NaN or ±inf (one fused pass).

    Raises:
        NonFiniteLossError: naming the model, the tensor and the checkpoint `latest` still points at.
    """
    names = list(tensors)
    bad = first_nonfinite([tensors[key] for key in names])
    if bad is not None:
        raise NonFiniteLossError(f"refusing to write checkpoint {checkpoint}: {name}'s {names[bad]} holds NaN/inf; "
                                 f"{resume_hint(output_dir)}")


def resume_hint(output_dir: str | os.PathLike) -> str:
    """What a run stopped by a failure resumes from: the checkpoint `latest` points at, or none yet."""
    last = latest_checkpoint(output_dir)
    if last is None:
        return "no checkpoint was written yet: once the cause is fixed, --resume starts the run again from the beginning"
    return f"the last good checkpoint is {last} (`latest`): once the cause is fixed, --resume continues from it"


def save_checkpoint(output_dir: str | os.PathLike, iteration: int, *, states: Iterable, exchange_state: dict,
                    run_state: dict[str, Any], keep: int = 2) -> Path:
    """Write the checkpoint for `iteration` (0-based, done) atomically and point `latest` at it.

    Args:
        output_dir: run directory.
        iteration: the last completed iteration.
        states: (name, trainable tensors, learner state) per model (`bundle_states`); consumed to its end also when
            a write fails, so that processes gathering FSDP2 shards in step with it never wait alone.
        exchange_state: `RoleExchange.state_dict()`.
        run_state: JSON-able run identity (config, model name, vocab size, ...).
        keep: how many checkpoints to keep (older ones are deleted after the new one is in place).

    Returns:
        The checkpoint folder.

    Raises:
        OSError: if writing fails (e.g. errno ENOSPC, disk full); the message names the checkpoint and the one `latest`
            still points at. The previous checkpoint and `latest` are untouched and the temporary folder is removed.
        NonFiniteLossError: a model's trainable tensor holds NaN/inf (`refuse_nonfinite`): nothing is written,
            `latest` is untouched.
    """
    root = Path(output_dir) / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(root)
    final = checkpoint_path(output_dir, iteration)
    tmp = root / f"{_TMP_PREFIX}iter-{iteration:06d}-{os.getpid()}"
    states = iter(states)
    try:
        with write_errors(tmp):  # a full disk, a file-size limit: OSError, whichever library wrote
            tmp.mkdir()
            for name, tensors, learner_state in states:
                refuse_nonfinite(name, tensors, final, output_dir)
                sub = tmp / name
                sub.mkdir()
                save_file(tensors, str(sub / "trainable.safetensors"))
                if learner_state:  # a frozen snapshot has no learner: its weights only
                    learner_state = dict(learner_state)
                    torch.save(learner_state.pop("optimizer"), sub / "learner.pt")
                    _write_json(sub / "learner.json", learner_state)
            torch.save({"torch": torch.get_rng_state()}, tmp / "rng.pt")
            _write_json(tmp / STATE_FILE, {"format": FORMAT, "iteration": iteration, "exchange": exchange_state,
                                           **run_state})
            _fsync_tree(tmp)
            if final.exists():  # a complete checkpoint of this iteration from a run that crashed before `latest`
                shutil.rmtree(final)
            os.replace(tmp, final)
            pointer_tmp = root / f".{LATEST}.tmp"
            pointer_tmp.write_text(final.name, encoding="utf-8")
            _fsync(pointer_tmp)
            os.replace(pointer_tmp, root / LATEST)
            _fsync(root)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        for _ in states:  # the other processes are still gathering the remaining models with this one
            pass
        raise OSError(exc.errno, f"writing checkpoint {final} failed: {exc.strerror or exc}; "
                                 f"{resume_hint(output_dir)}") from exc
    except NonFiniteLossError:
        shutil.rmtree(tmp, ignore_errors=True)
        for _ in states:  # as for OSError: the other processes are still gathering with this one
            pass
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = [p for p in checkpoint_folders(root) if p != final]
    for stale in old[: max(0, len(old) - (keep - 1))]:
        shutil.rmtree(stale, ignore_errors=True)
    logger.info("checkpoint written: %s", final)
    return final


def checkpoints_root(checkpoint: str | os.PathLike) -> Path | None:
    """The ``<run>/checkpoints`` folder that a checkpoint argument (a checkpoint folder, or a run directory) belongs
    to, resolved: the folder whose old checkpoints rotation deletes. None for a checkpoint folder outside a run
    (a copy elsewhere: nothing rotates there)."""
    path = Path(checkpoint).resolve()
    if (path / STATE_FILE).exists():
        return path.parent if path.parent.name == CHECKPOINT_DIR else None
    return path / CHECKPOINT_DIR


def check_outside_rotation(out: str | os.PathLike, checkpoint: str | os.PathLike, *, option: str,
                           example: str) -> None:
    """Refuse an output path inside the run's ``checkpoints/``, whose old checkpoint folders rotation deletes (with
    whatever was written into them).

    Raises:
        ValueError: naming `option`, the folder and a path outside it (the run's folder name + `example`).
    """
    root = checkpoints_root(checkpoint)
    target = Path(out).resolve()
    if root is not None and (target == root or root in target.parents):
        raise ValueError(f"{option} {out} is inside the run's checkpoints folder {root}, whose old checkpoints are "
                         f"deleted as training goes on; choose a path outside it (e.g. "
                         f"{root.parent.with_name(root.parent.name + example)})")


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The checkpoint `latest` points at; without a usable pointer the newest complete `iter-*` folder; else None."""
    root = Path(output_dir) / CHECKPOINT_DIR
    pointer = root / LATEST
    if pointer.is_file():
        name = pointer.read_text(encoding="utf-8", errors="replace").strip()
        path = root / name
        if name.startswith("iter-") and "/" not in name and (path / STATE_FILE).is_file():
            return path
        logger.warning("%s points at %r, which is not a complete checkpoint; using the newest complete one", pointer,
                       name)
    complete = [p for p in checkpoint_folders(root) if (p / STATE_FILE).is_file()]
    return complete[-1] if complete else None


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: {what}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc}); the checkpoint is damaged") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} holds a {type(data).__name__}, expected a JSON object")
    return data


def read_trainer_state(checkpoint: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint's `trainer_state.json`, of this version's `FORMAT`.

    Raises:
        CheckpointError: missing, not JSON, without the keys a cory checkpoint has, or of another format (one line
            naming it and what to do).
    """
    state = _read_json(Path(checkpoint) / STATE_FILE, f"{checkpoint} is not a cory checkpoint")
    missing = [k for k in ("iteration", "exchange", "config") if k not in state]
    if missing:
        raise CheckpointError(f"{Path(checkpoint) / STATE_FILE} lacks {missing}: not a cory checkpoint")
    found = state.get("format", 1)
    if found != FORMAT:
        newer = isinstance(found, int) and found > FORMAT
        raise CheckpointError(
            f"{checkpoint} is a checkpoint of format {found}, this cory reads format {FORMAT}: "
            + ("upgrade cory to read it" if newer else
               f"resume, evaluate or export it with the cory that wrote it (git checkout {FORMAT_1_COMMIT}, then pip "
               "install -e .), or train the run again with this one"))
    return state


def find_checkpoint(path: str | os.PathLike, *, name: str = "checkpoint") -> Path:
    """The checkpoint a command argument `name` names: a checkpoint folder itself, or a run directory's latest
    checkpoint.

    Raises:
        FileNotFoundError / NotADirectoryError / PermissionError: nothing there, a file, an unreadable folder
            (`cory_env.checks.check_path`); a folder that is neither a checkpoint nor a run directory with one.
    """
    from cory_env.checks import check_path
    fix = "give a run directory (runs/x) or one of its checkpoint folders"
    path = check_path(path, name, kind="folder", fix=fix)
    if (path / STATE_FILE).exists():
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise FileNotFoundError(f"{name} {str(path)!r} is neither a checkpoint folder nor a run directory with "
                                "checkpoints (a run writes its first checkpoint after checkpoint_every iterations, "
                                f"or at its end); {fix}")
    return latest


def warn_if_unfinished(run: str | os.PathLike, state: dict[str, Any], *, use: str) -> None:
    """Log a warning when `run`'s latest checkpoint (its `state`) holds fewer iterations than the run was given:
    the run is still training or stopped, and its models are `use` ("played", "evaluated", "exported") as they are."""
    done, total = int(state["iteration"]) + 1, int(state["config"]["num_iterations"])
    if done < total:
        logger.warning("run %s is unfinished: its latest checkpoint holds %d of %d iterations (still training, or "
                       "stopped); its models are %s as they are there", run, done, total, use)


def _safe_torch_load(path: Path) -> Any:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: incomplete checkpoint")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle payloads that weights_only refuses land here
        raise CheckpointError(f"refusing to load {path}: it is not a plain tensor/state file ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200] if str(exc) else ''}). cory only loads weights_only "
                              "checkpoints.") from exc


def _safe_load_file(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: incomplete checkpoint or another run's folder")
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error type for torn or foreign files
        raise CheckpointError(f"{path} is not a readable safetensors file ({type(exc).__name__}: {exc})") from exc


def read_learner_state(checkpoint: str | os.PathLike, name: str, *, with_optimizer: bool = True) -> dict[str, Any]:
    """Model `name`'s learner state in `checkpoint` (KL controller, score statistics; the optimizer state under
    ``"optimizer"`` with `with_optimizer`), without touching any model.

    Raises:
        CheckpointError: a missing, damaged or unsafe file (named).
    """
    sub = Path(checkpoint) / name
    state = _read_json(sub / "learner.json", "incomplete checkpoint")
    if with_optimizer:
        state["optimizer"] = _safe_torch_load(sub / "learner.pt")
    return state


def load_agent(checkpoint: str | os.PathLike, name: str, agent) -> None:
    """Copy model `name`'s trained weights (its full model or LoRA adapter, and its value head) from `checkpoint`
    into `agent` in place: what inference and `cory eval` need (no learner, no optimizer state).

    Raises:
        CheckpointError: a missing, damaged, unsafe or mismatched file (named).
    """
    state, where = _read_agent_state(checkpoint, name)
    load_trainable_state(agent, state, where=where)


def _read_agent_state(checkpoint: str | os.PathLike, name: str) -> tuple[dict[str, torch.Tensor], str]:
    weights = Path(checkpoint) / name / "trainable.safetensors"
    return _safe_load_file(weights), str(weights)


def load_bundle(checkpoint: str | os.PathLike, bundle, *, frozen: bool = False) -> None:
    """Restore one bundle (agent weights and the learner's state) from `checkpoint/<bundle.name>` (resume); a
    `frozen` snapshot's weights only (it has no learner state).

    Raises:
        CheckpointError: a missing, damaged, unsafe or mismatched file (named).
    """
    agent_state, where = _read_agent_state(checkpoint, bundle.name)  # read everything before changing anything
    if frozen:
        load_trainable_state(bundle.agent, agent_state, where=where)
        return
    learner_state = read_learner_state(checkpoint, bundle.name)
    load_trainable_state(bundle.agent, agent_state, where=where)
    optimizer = getattr(bundle.learner, "optimizer", None)
    try:
        if isinstance(optimizer, torch.optim.Optimizer):  # whole Adam moments -> this process's FSDP2 shards
            learner_state["optimizer"] = sharded_optimizer_state(learner_state["optimizer"], optimizer)
        bundle.learner.load_state_dict(learner_state)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{Path(checkpoint) / bundle.name}: the learner state does not fit this learner "
                              f"({type(exc).__name__}: {exc})") from exc


def load_checkpoint(checkpoint: str | os.PathLike, *, bundles: dict, exchange) -> dict[str, Any]:
    """Restore every bundle, the seat assignment and the torch RNG; returns the trainer state.

    Raises:
        CheckpointError: see `load_bundle`; also a damaged `rng.pt` or seat assignment.
    """
    state = read_trainer_state(checkpoint)
    rng = _safe_torch_load(Path(checkpoint) / "rng.pt")
    if not (isinstance(rng, dict) and isinstance(rng.get("torch"), torch.Tensor) and rng["torch"].dtype == torch.uint8):
        raise CheckpointError(f"{Path(checkpoint) / 'rng.pt'} does not hold a torch RNG state")
    try:  # first: a population rebuilds the checkpoint's frozen snapshots, whose weights load below
        exchange.load_state_dict(state["exchange"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{checkpoint}: the seat assignment {state['exchange']!r} does not fit this run "
                              f"({type(exc).__name__}: {exc})") from exc
    for bundle in {**bundles, **exchange.bundles}.values():
        load_bundle(checkpoint, bundle, frozen=bundle.name in exchange.frozen)
    torch.set_rng_state(rng["torch"])
    return state
