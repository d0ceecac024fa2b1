"""Session and run config entries: the checks onnxruntime makes on them, made where it makes them.

A key must be a non-empty string (checked when added); entries onnxruntime parses as integers or from a fixed
set of words are refused at session creation when they do not parse, naming the key. Entries ort-core itself
reads are checked by their readers; unknown keys pass, as in onnxruntime.
"""

from __future__ import annotations

from .errors import Fail, InvalidArgument

MAX_KEY_LENGTH = 1024

INTEGER_KEYS = {
    "session.graph_optimizations_loop_level": None,
    "session.dynamic_block_base": None,
    "session.qdq_matmulnbits_accuracy_level": None,
    "session.optimized_model_external_initializers_min_size_in_bytes": 0,
}
"""Keys whose values onnxruntime parses as integers (and fails the session when they do not parse) -> the least
value it accepts (None: any)."""

WORD_KEYS = {"optimization.minimal_build_optimizations": ("", "save", "apply")}
"""Keys onnxruntime accepts only a fixed set of values for (InvalidArgument otherwise)."""


class MissingConfigEntry(Fail, KeyError):
    """``get_session_config_entry`` / ``get_run_config_entry`` of a key never set: a RuntimeError, as onnxruntime
    raises, and a KeyError, as ort-core raised before."""

    __str__ = Exception.__str__


def checked_key(key: object) -> str:
    """The key as a string; empty or overlong keys are refused, as onnxruntime refuses them when added."""
    key = str(key)
    if not key or len(key) > MAX_KEY_LENGTH:
        raise Fail(f"Config key is empty or longer than maximum length {MAX_KEY_LENGTH}")
    return key


def missing(key: str, owner: str) -> MissingConfigEntry:
    return MissingConfigEntry(f"{owner} does not have configuration with key: {key}")


def check_session_config(config: dict[str, str]) -> None:
    """Refuse entries onnxruntime would fail the session for (an integer entry that does not parse, a word
    outside its set), naming the key and the value."""
    for key in INTEGER_KEYS.keys() & config.keys():
        try:
            value = int(config[key].strip())
        except ValueError:
            raise Fail(f"session config entry '{key}' must be an integer, got {config[key]!r}") from None
        least = INTEGER_KEYS[key]
        if least is not None and value < least:
            raise Fail(f"session config entry '{key}' must be at least {least}, got {config[key]!r}")
    for key, words in WORD_KEYS.items():
        if key in config and config[key] not in words:
            raise InvalidArgument(f"Invalid value for {key}: {config[key]} (expected one of {list(words)})")
