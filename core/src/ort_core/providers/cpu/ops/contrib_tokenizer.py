r"""onnxruntime's contrib ``Tokenizer`` (domain com.microsoft, version 1) on string tensors.

X is a string tensor of shape [C] or [N, C]; Y adds an axis: [C, D] or [N, C, D], D being the most tokens
any string gave. A row holds a string's tokens; with ``mark`` set it opens with the character 0x02 and
has 0x03 right after its last token; ``pad_value`` fills the rest. When no string gives a token D is 0,
markers or not; an empty X of shape [0], [N, 0] or [0, C] gives [0], [N, 0] or [0, 0]. ``mark``,
``pad_value`` and ``mincharnum`` (> 0) are required, and one of ``separators`` (wins when both are set)
or ``tokenexp``; other attributes (tokenexpsplit too: not in onnxruntime's schema) are refused, as
onnxruntime refuses them.

Three modes:
  * characters, when separators is [""] or tokenexp is ".": each character is a token (newlines too);
    mincharnum must be 1.
  * separators, a non-empty list of regular expressions applied in turn: each cuts every piece left by
    the one before at its matches and keeps the pieces of at least mincharnum characters. After an empty
    match the search goes on one character further, so that character is lost (a separator matching the
    empty string, such as "" among others, removes everything), and an empty match at the very end leaves
    no trailing piece (onnxruntime reads past the string there; nothing comes out of it in practice).
  * tokenexp, one expression whose successive matches are the tokens. A match shorter than mincharnum is
    dropped and the search resumes one character after where that match began ("ab cdef" with [a-z]+
    and mincharnum 3 gives "cdef").

Characters are code points (onnxruntime counts UTF-8 characters: the same).

onnxruntime matches with RE2 in leftmost-longest mode; Python's ``re`` stands in, on a translated pattern
that gives the same matches:
  * longest: among the matches starting leftmost the longest wins ("a|ab" finds "ab"; lazy quantifiers
    and the U flag change nothing, so they are dropped). ``re``'s first match is that one unless the
    pattern has an alternation or a quantified group; for those, longer ends are tried one by one up to
    where the pattern's characters reach (slower, still exact).
  * \d \w \s \b \B and negations are ASCII in RE2 (\s is [\t\n\f\r ], no \v): spelled out. Non-multiline
    $ and \z are the end of the text (``re``'s $ also matches before a final newline): written \Z.
  * mid-pattern flags (?i) last to the end of their group, across "|": written as scoped ``re`` groups; a
    quantifier after them repeats the atom before them, as in RE2. POSIX classes [[:alpha:]], \Q...\E,
    \x{hex}, octal \123 and Unicode general categories \pL \p{Lu} \PN are translated (categories from
    Python's unicodedata, whose Unicode version may lag RE2's); "a{,2}" is a literal in RE2: escaped.
  * refused, as by RE2: lookaround, backreferences, (?#...), the x flag, possessive or stacked
    quantifiers (a*+, a**), repeat counts over 1000, \Z, \u, unknown escapes.
  * not the same, where onnxruntime fails: RE2 works on UTF-8 bytes, so \C (any byte; here any character)
    and \B (here between characters only) can cut a multi-byte character, and onnxruntime then fails with
    "invalid utf8"; here the match is on whole characters. Refused although RE2 takes them: Unicode
    scripts (\p{Greek}). Case folding under (?i) uses Python's tables (equal to RE2's but for rarities).
  * time: RE2 is linear, ``re`` backtracks, so a pathological pattern such as (a*)*b on a long run of "a"
    takes exponential time here where onnxruntime does not.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ....limits import check_tensor_size
from ..registry import register

START_MARK, END_MARK = "\x02", "\x03"
_ATTRIBUTES = ("mark", "mincharnum", "pad_value", "separators", "tokenexp")

# ------------------------------------------------------------------ RE2 -> re translation

_CLASS_SPECS = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\t\n\f\r ", "alnum": "0-9A-Za-z", "alpha": "A-Za-z",
                "ascii": "\x00-\x7f", "blank": "\t ", "cntrl": "\x00-\x1f\x7f", "digit": "0-9", "graph": "!-~",
                "lower": "a-z", "print": " -~", "punct": "!-/:-@[-`{-~", "space": "\t\n\v\f\r ", "upper": "A-Z",
                "word": "0-9A-Za-z_", "xdigit": "0-9A-Fa-f"}
_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")
_FLAGS = re.compile(r"\(\?([imsU]*)(?:-([imsU]*))?([:)])")
_NAMED = re.compile(r"\(\?P?<(\w+)>")
_POSIX = re.compile(r"\[:(\^?)(\w+):\]")
_HEX = re.compile(r"\\x\{([0-9A-Fa-f]{1,6})\}")
_OCTAL = re.compile(r"\\(0[0-7]{0,2}|[1-7][0-7]{1,2})")
_UNICODE = re.compile(r"\\([pP])(?:\{(\^?)(\w+)\}|(\w))")


def _spans(spec: str) -> str:
    """The body of a character class (no brackets) holding the characters of ``spec`` ("a-z" = a range)."""
    out, i = [], 0
    while i < len(spec):
        if i + 2 < len(spec) and spec[i + 1] == "-":
            out.append(f"\\U{ord(spec[i]):08x}-\\U{ord(spec[i + 2]):08x}")
            i += 3
        else:
            out.append(f"\\U{ord(spec[i]):08x}")
            i += 1
    return "".join(out)


@cache
def _category(name: str) -> str:
    """Class body of a Unicode general category ("L", "Lu", ...; "Any") from Python's unicodedata tables.
    Built once per process (a scan of all code points, ~0.3 s); unassigned code points (Cn) are in none."""
    if name == "Any":
        return "\\U00000000-\\U0010ffff"
    if not (1 <= len(name) <= 2 and name[0] in "CLMNPSZ") or name == "Cn":
        raise ValueError(f"Unicode class {name!r} (scripts such as Greek are not supported by this stand-in)")
    out, low = [], None
    for cp in range(0x110001):
        cat = unicodedata.category(chr(cp)) if cp <= 0x10FFFF else ""
        inside = cat.startswith(name) and cat != "Cn"
        if inside and low is None:
            low = cp
        elif not inside and low is not None:
            out.append(f"\\U{low:08x}-\\U{cp - 1:08x}")
            low = None
    if not out:
        raise ValueError(f"unknown Unicode class {name!r}")
    return "".join(out)


def _unicode_class(src: str, i: int) -> tuple[str, bool, int]:
    """(class body, negated, index after) for the RE2 escape \\pN, \\p{Lu}, \\P{^L}... at src[i]."""
    m = _UNICODE.match(src, i)
    if m is None:
        raise ValueError(f"invalid escape {src[i:i + 4]!r}")
    return _category(m[3] or m[4]), (m[1] == "P") != (m[2] == "^"), m.end()


def _escape(src: str, i: int, in_class: bool) -> tuple[str, int]:
    """The ``re`` text for the RE2 escape at src[i] and the index after it."""
    if i + 1 >= len(src):
        raise ValueError("trailing \\")
    c = src[i + 1]
    if c in "dws":
        body = _spans(_CLASS_SPECS[c])
        return (body if in_class else f"[{body}]"), i + 2
    if c in "DWS" and not in_class:  # a negated class, not the complement's ranges: (?i) folds those
        return f"[^{_spans(_CLASS_SPECS[c.lower()])}]", i + 2
    if c in "pP" and not in_class:
        body, negated, end = _unicode_class(src, i)
        return f"[{'^' if negated else ''}{body}]", end
    if c == "C" and not in_class:  # one byte in RE2: one character here
        return "(?s:.)", i + 2
    if c == "x" and src.startswith("{", i + 2):
        m = _HEX.match(src, i)
        if m is None or int(m[1], 16) > 0x10FFFF:
            raise ValueError(f"invalid escape {src[i:i + 12]!r}")
        return f"\\U{int(m[1], 16):08x}", m.end()
    if c in "0123456789":
        m = _OCTAL.match(src, i)
        if m is None:
            raise ValueError(f"backreference \\{c} (RE2 has none)")
        return f"\\U{int(m[1], 8):08x}", m.end()
    if c == "Q":
        end = src.find("\\E", i + 2)
        end = len(src) if end < 0 else end
        return re.escape(src[i + 2:end]), min(end + 2, len(src))
    if not in_class and c in "bB":
        return f"(?a:\\{c})", i + 2
    if not in_class and c in "Az":
        return ("(?:\\A)" if c == "A" else "(?:\\Z)"), i + 2  # groups: RE2 lets anchors be repeated
    if c in "aftnrvx" or not (c.isascii() and c.isalnum()):
        return "\\" + c, i + 2
    raise ValueError(f"escape \\{c} (not RE2, or an RE2 escape that Python's re cannot run)")


def _char_class(src: str, i: int) -> tuple[str, int]:
    """The ``re`` text for the RE2 class opening at src[i] and the index after it. Negated members
    (\\W, [:^alpha:]) become alternatives ``[^...]``: a range of their complement would let (?i) fold
    letters into it ("k" into the Kelvin sign's range), which RE2 does not."""
    parts, negated, j = [], [], i + 1
    inverted = src.startswith("^", j)
    j += inverted
    if src.startswith("]", j):
        parts.append("\\]")
        j += 1
    while j < len(src):
        c = src[j]
        if c == "]":
            alternatives = ([f"[{''.join(parts)}]"] if parts else []) + [f"[^{body}]" for body in negated]
            if not negated:
                return f"[{'^' if inverted else ''}{''.join(parts)}]", j + 1
            either = "|".join(alternatives)
            return (f"(?:(?!{either})[\\s\\S])" if inverted else f"(?:{either})"), j + 1
        m = _POSIX.match(src, j) if c == "[" else None
        if m is not None:
            if m[2] not in _CLASS_SPECS or len(m[2]) == 1:
                raise ValueError(f"invalid character class {m[0]!r}")
            (negated if m[1] else parts).append(_spans(_CLASS_SPECS[m[2]]))
            j = m.end()
        elif c == "\\" and src[j + 1:j + 2] in ("D", "W", "S"):
            negated.append(_spans(_CLASS_SPECS[src[j + 1].lower()]))
            j += 2
        elif c == "\\" and src[j + 1:j + 2] in ("p", "P"):
            body, negate, j = _unicode_class(src, j)
            (negated if negate else parts).append(body)
        elif c == "\\":
            text, j = _escape(src, j, in_class=True)
            parts.append(text)
        else:
            parts.append("\\" + c if c in "[&~|" else c)  # literal in RE2; re warns of set operations
            j += 1
    raise ValueError("missing ]")


def _quantifier(src: str, i: int) -> tuple[str, int]:
    m = _REPEAT.match(src, i) if src[i] == "{" else None
    if m is not None:
        low, high = int(m[1]), (int(m[3]) if m[3] else None) if m[2] else int(m[1])
        if low > 1000 or (high is not None and not low <= high <= 1000):
            raise ValueError(f"invalid repetition size {m[0]}")
        text, i = m[0], m.end()
    else:
        text, i = src[i], i + 1
    if src.startswith("?", i):  # lazy: the same as greedy when the longest match wins
        i += 1
    if i < len(src) and (src[i] in "*+?" or _REPEAT.match(src, i)):
        raise ValueError(f"bad repetition operator (stacked) at {src[i:i + 4]!r}")
    return text, i


@dataclass
class _Scope:
    """An open group of the pattern being translated."""

    multiline: bool
    icase: bool
    wraps: list[str] = field(default_factory=list)  # scoped flag groups standing for mid-group (?flags)
    opened_at: int | None = None  # where in the output the group opens


def _open_group(src: str, i: int, scopes: list[_Scope]) -> tuple[str, int, bool]:
    """The ``re`` text for the RE2 group or flag setting "(?..." at src[i], the index after it, and whether
    it was a flag setting (?flags), which lasts to the end of the enclosing group."""
    named, flags, outer = _NAMED.match(src, i), _FLAGS.match(src, i), scopes[-1]
    if named is not None:
        scopes.append(_Scope(outer.multiline, outer.icase))
        return f"(?P<{named[1]}>", named.end(), False
    if flags is None or flags[2] == "" or (flags[3] == ")" and not flags[1] and flags[2] is None):
        raise ValueError(f"unsupported group {src[i:i + 4]!r}")
    on, off = flags[1].replace("U", ""), (flags[2] or "").replace("U", "")  # U: nothing when longest wins
    multiline = "m" in on or (outer.multiline and "m" not in off)
    icase = "i" in on or (outer.icase and "i" not in off)
    text = "(?" + on + ("-" + off if off else "") + ":"
    if flags[3] == ":":
        scopes.append(_Scope(multiline, icase))
        return text, flags.end(), False
    outer.multiline, outer.icase = multiline, icase
    outer.wraps.append(text)
    return text, flags.end(), True


_WORD = "[0-9A-Za-z_]"
_IS_WORD = re.compile(_WORD).fullmatch
# zero-width assertions as written for a match that must end at a forced end e < len(text) (re's endpos):
# re sees the end of the text there, RE2 sees the character text[e]; keyed by that character's kind
_AT_FORCED_END = {
    "word": {"b": f"(?:(?!\\Z)(?a:\\b)|\\Z(?-i:(?<!{_WORD})))", "B": f"(?:(?!\\Z)(?a:\\B)|\\Z(?-i:(?<={_WORD})))",
             "$m": "(?=\n)", "$": "(?!)"},
    "newline": {"b": "(?a:\\b)", "B": "(?a:\\B)", "$m": "(?:$)", "$": "(?!)"},
    "other": {"b": "(?a:\\b)", "B": "(?a:\\B)", "$m": "(?=\n)", "$": "(?!)"},
}


def translate(src: str, forced_end: str | None = None) -> tuple[str, bool, bool, str]:
    """RE2 pattern -> (``re`` pattern, ambiguous, end_sensitive, alphabet); raises ValueError for what is
    refused. ambiguous: ``re``'s first match may be shorter than the longest (alternation, quantified
    group); end_sensitive: the pattern looks past a match's end (\\b, \\B, $, \\z); alphabet: a single
    character pattern matching every character the pattern can consume. ``forced_end``: see _AT_FORCED_END."""
    out: list[str] = []
    scopes = [_Scope(False, False)]
    pending: list[str] = []  # (?flags) openers not yet written: a quantifier after them repeats the atom before
    letters: list[str] = []
    ambiguous = end_sensitive = quantified = group = False
    atom = None  # where in ``out`` the last atom starts; group: that atom is a group of the pattern
    i = 0
    while i < len(src):
        c, scope = src[i], scopes[-1]
        if c in "*+?" or (c == "{" and _REPEAT.match(src, i)):
            if atom is not None and (quantified or group):
                ambiguous = True
                if quantified:  # a{2}(?i)* in RE2 repeats a{2} again
                    out[atom:] = ["(?:" + "".join(out[atom:]) + ")"]
            text, i = _quantifier(src, i)
            out.append(text)
            quantified = True
            continue
        opened = c == "(" and src.startswith("(?", i)
        if opened:
            text, i, setting = _open_group(src, i, scopes)
            if setting:
                pending.append(text)
                continue
        out.extend(pending)
        pending.clear()
        start, quantified, group, letter = len(out), False, c == ")", None
        if c == "\\":
            kind, begin = src[i + 1:i + 2], i
            text, i = _escape(src, i, in_class=False)
            if kind in ("b", "B", "z"):
                end_sensitive = True
                if forced_end is not None:
                    text = _AT_FORCED_END[forced_end]["$" if kind == "z" else kind]
            elif kind == "Q":  # a quantifier after \Q...\E repeats its last character
                chars = [re.escape(ch) for ch in src[begin + 2:i].removesuffix("\\E")] or [""]
                letters.extend(f"(?{'i' if scope.icase else '-i'}:{ch})" for ch in chars if ch)
                out.extend(chars[:-1])
                start, text = len(out), chars[-1]
            elif kind != "A":
                letter = text
        elif c == "[":
            text, i = _char_class(src, i)
            letter = text
        elif c == "(":
            if not opened:
                scopes.append(_Scope(scope.multiline, scope.icase))
                text, i = "(", i + 1
            scopes[-1].opened_at, start = start, None
        elif c == ")":
            if len(scopes) == 1:
                raise ValueError("unexpected )")
            closed = scopes.pop()
            text, i, start = ")" * (len(closed.wraps) + 1), i + 1, closed.opened_at
        elif c == "|":
            ambiguous, start = True, None
            text, i = ")" * len(scope.wraps) + "|" + "".join(scope.wraps), i + 1
        elif c == "$":
            end_sensitive = True
            key = "$m" if scope.multiline else "$"
            text = _AT_FORCED_END[forced_end][key] if forced_end else ("(?:$)" if scope.multiline else "(?:\\Z)")
            i += 1
        elif c == "^":
            text, i = "(?:^)", i + 1
        else:
            text, i = ("\\{" if c == "{" else c), i + 1
            letter = "(?s:.)" if c == "." else text
        if letter is not None:
            letters.append(f"(?{'i' if scope.icase else '-i'}:{letter})")
        out.append(text)
        atom = start
    out.extend(pending)
    if len(scopes) > 1:
        raise ValueError("missing )")
    out.append(")" * len(scopes[0].wraps))
    return "".join(out), ambiguous, end_sensitive, "|".join(letters) or "(?!)"


class _Finder:
    """Leftmost-longest search of one RE2 pattern, translated once (immutable: shared by threads).

    When ``re``'s first match may not be the longest, the longer ends are tried, from the furthest the
    pattern's characters reach, with ``fullmatch`` up to that end; a pattern looking past its end is
    compiled once per kind of character that follows (see _AT_FORCED_END)."""

    def __init__(self, src: str):
        pattern, self.ambiguous, end_sensitive, alphabet = translate(src)
        self.regex = re.compile(pattern)
        self.reach = re.compile(f"(?:{alphabet})*")
        self.forced = ({kind: re.compile(translate(src, kind)[0]) for kind in _AT_FORCED_END}
                       if self.ambiguous and end_sensitive else None)

    def search(self, text: str, pos: int) -> tuple[int, int] | None:
        m = self.regex.search(text, pos)
        if m is None:
            return None
        start, end = m.span()
        if self.ambiguous:
            for e in range(self.reach.match(text, start).end(), end, -1):
                regex = self.regex
                if self.forced is not None and e < len(text):
                    after = text[e]
                    regex = self.forced["newline" if after == "\n" else "word" if _IS_WORD(after) else "other"]
                if regex.fullmatch(text, start, e):
                    return start, e
        return start, end



def _compile(node: Node, what: str, src: str) -> _Finder:
    try:
        return _Finder(src)
    except (ValueError, re.error) as e:
        raise KernelError(f"{node.label}: cannot use {what} {src!r}: {e}") from None


# ------------------------------------------------------------------ the three modes

def _cut(text: str, finder: _Finder, mincharnum: int) -> list[str]:
    """The pieces of ``text`` between separator matches, of at least mincharnum characters."""
    pieces, start, n = [], 0, len(text)
    while start <= n:
        hit = finder.search(text, start)
        if hit is None:
            if n - start >= mincharnum:
                pieces.append(text[start:])
            break
        if hit[0] - start >= mincharnum:
            pieces.append(text[start:hit[0]])
        start = hit[1] if hit[1] > hit[0] else hit[0] + 1
    return pieces


def _matches(text: str, finder: _Finder, mincharnum: int) -> list[str]:
    """The successive matches of at least mincharnum characters."""
    tokens, start, n = [], 0, len(text)
    while start <= n:
        hit = finder.search(text, start)
        if hit is None:
            break
        if hit[1] - hit[0] >= mincharnum:
            tokens.append(text[hit[0]:hit[1]])
            start = hit[1]
        else:
            start = hit[0] + 1
    return tokens


def _attribute(node: Node, name: str, kind: type):
    value = node.attr(name)
    if value is None:
        raise KernelError(f"{node.label}: required attribute '{name}' is missing")
    if isinstance(value, bytes) and kind is str:
        value = value.decode("utf-8")
    if not isinstance(value, kind):
        raise KernelError(f"{node.label}: attribute '{name}' must be {kind.__name__}, got {value!r}")
    return value


def _texts(node: Node, x) -> list[str]:
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "OUS":
        raise KernelError(f"{node.label}: X must be a string tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim not in (1, 2):
        raise KernelError(f"{node.label}: X must have shape [C] or [N, C], got {list(x.shape)}")
    items = x.reshape(-1).tolist()
    for k, s in enumerate(items):
        if isinstance(s, bytes):
            try:
                items[k] = s.decode("utf-8")
            except UnicodeDecodeError:
                raise KernelError(f"{node.label}: X holds invalid UTF-8: {s!r}") from None
        elif not isinstance(s, str):
            raise KernelError(f"{node.label}: X holds a {type(s).__name__}, not a string")
    return items


@register("Tokenizer", since=1, domain="com.microsoft")
def tokenizer_factory(node: Node, opset: int):
    unknown = sorted(set(node.attrs) - set(_ATTRIBUTES))
    if unknown:
        raise KernelError(f"{node.label}: unrecognized attribute(s) {unknown}; Tokenizer takes {list(_ATTRIBUTES)}")
    mark = bool(_attribute(node, "mark", int))
    pad_value = _attribute(node, "pad_value", str)
    mincharnum = _attribute(node, "mincharnum", int)
    if mincharnum < 1:
        raise KernelError(f"{node.label}: attribute 'mincharnum' must be positive, got {mincharnum}")
    separators, tokenexp = node.attr("separators"), node.attr("tokenexp")
    if separators is not None:
        if isinstance(separators, (list, tuple)):
            separators = [s.decode("utf-8") if isinstance(s, bytes) else s for s in separators]
        if not isinstance(separators, (list, tuple)) or not all(isinstance(s, str) for s in separators):
            raise KernelError(f"{node.label}: attribute 'separators' must be a list of strings, got {separators!r}")
        if not separators:
            raise KernelError(f"{node.label}: attribute 'separators' must not be empty")
        chars = list(separators) == [""]
    elif tokenexp is not None:
        tokenexp = _attribute(node, "tokenexp", str)
        if not tokenexp:
            raise KernelError(f"{node.label}: attribute 'tokenexp' must not be empty")
        chars = tokenexp == "."
    else:
        raise KernelError(f"{node.label}: one of the attributes 'separators' or 'tokenexp' is required")
    if chars and mincharnum > 1:
        raise KernelError(f"{node.label}: mincharnum {mincharnum} is too big for character tokenization (max 1)")

    if chars:
        split = list
    elif separators is not None:
        finders = [_compile(node, "separator", s) for s in separators]

        def split(text: str) -> list[str]:
            pieces = [text]
            for finder in finders:
                pieces = [p for piece in pieces for p in _cut(piece, finder, mincharnum)]
            return pieces
    else:
        finder = _compile(node, "tokenexp", tokenexp)

        def split(text: str) -> list[str]:
            return _matches(text, finder, mincharnum)

    def kernel(x):
        items = _texts(node, x)
        if x.size == 0:
            return (np.empty((x.shape[0], 0) if x.ndim == 2 else (0,), dtype=object),)
        rows = [split(s) for s in items]
        width = max(len(r) for r in rows)
        if width == 0:
            return (np.empty((*x.shape, 0), dtype=object),)
        width += 2 * mark
        check_tensor_size(node.label, (*x.shape, width), object)
        flat: list[str] = []
        for r in rows:
            flat.extend([START_MARK, *r, END_MARK] if mark else r)
            flat.extend([pad_value] * (width - len(r) - 2 * mark))
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return (out.reshape(*x.shape, width),)
    return kernel
