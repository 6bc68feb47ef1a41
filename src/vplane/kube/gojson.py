"""Go ``encoding/json``'s syntax errors, for the answers that quote them.

kube-apiserver reads a request body's ``apiVersion`` and ``kind`` with Go's ``json.Unmarshal`` before
anything else (and patches with a fork of the same decoder), so a body that is not JSON is answered in
that decoder's words: ``unexpected end of JSON input``, ``invalid character '}' looking for beginning of
object key string``. orjson refuses the same bodies in words of its own; :func:`syntax_error` says what
Go's scanner says. It is written from the scanner's observable rules, not its code:

- the error is at the first byte after which the input can no longer be the start of a JSON text, and
  names that byte (Go's ``quoteChar``) and what the scanner was in the middle of;
- at the end of the input the scanner is given one space: a number or literal cut short is reported as
  ``invalid character ' ' ...`` (``{"a":tru`` is ``invalid character ' ' in literal true (expecting
  'e')``), anything else unfinished as ``unexpected end of JSON input``;
- nothing past the first complete value but white space (``after top-level value``);
- at most 10000 nested arrays and objects (``exceeded max depth``);
- strings are not checked for UTF-8 (Go replaces bad bytes when it decodes).

Only bodies orjson already refused come here. A body orjson read to its end before refusing is the start
of a JSON text cut short, and :func:`end_of_input` answers it from its last bytes (a truncated upload of
any size costs a few passes in C). Any other body is scanned from the start, a Python step per token, at
most :data:`MAX_TOKENS` of them (about 50 ms): past that :func:`syntax_error` gives up (None), so a
multi-megabyte body cannot hold the server for seconds.
"""

from __future__ import annotations

import re

MAX_NESTING_DEPTH = 10_000
"""Go's ``maxNestingDepth``."""

MAX_TOKENS = 100_000
"""Tokens :func:`syntax_error` scans before giving up."""

UNEXPECTED_END = "unexpected end of JSON input"

_SPACE = re.compile(rb"[ \t\r\n]*")
_STRING_RUN = re.compile(rb'[^"\\\x00-\x1f]*')
_DIGITS = re.compile(rb"[0-9]*")
_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = frozenset(b'bfnrt\\/"')
_LITERALS = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}
_HEX_BYTES = b"0123456789abcdefABCDEF"
_TOKEN_BYTES = b"+-.0123456789ETaeflnrstu"  # what numbers and literals are made of
_GO_ESCAPES = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r", 0x5C: "\\\\"}

# What the scanner expects next (its states between tokens).
_VALUE = 0  # a value (top level, after ':' or after ',' in an array)
_VALUE_OR_CLOSE = 1  # a value or ']' (just after '[')
_KEY_OR_CLOSE = 2  # a key or '}' (just after '{')
_KEY = 3  # a key (after ',' in an object)
_COLON = 4  # ':' after a key
_NEXT = 5  # ',' or the closing bracket after a value in an array or object
_DONE = 6  # white space only, after the top-level value


class _Refused(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


def quote_char(byte: int) -> str:
    """How Go's scanner names a byte in its messages (``quoteChar``: the byte as a rune, in ``strconv.Quote``
    form between single quotes; a quote of either kind is special-cased)."""
    if byte == 0x27:
        return "'\\''"
    if byte == 0x22:
        return "'\"'"
    if byte in _GO_ESCAPES:
        return f"'{_GO_ESCAPES[byte]}'"
    if byte < 0x20 or byte == 0x7F:
        return f"'\\x{byte:02x}'"
    if 0x80 <= byte <= 0xA0 or byte == 0xAD:  # not printable for strconv.IsPrint
        return f"'\\u{byte:04x}'"
    return f"'{chr(byte)}'"


def _invalid(data: bytes, at: int, context: str) -> _Refused:
    """The scanner's error for the byte at ``at`` (a space when the input ended there)."""
    byte = data[at] if at < len(data) else 0x20
    return _Refused(f"invalid character {quote_char(byte)} {context}")


def _skip(pattern: re.Pattern[bytes], data: bytes, at: int) -> int:
    """Past the run ``pattern`` matches at ``at`` (each pattern here also matches nothing)."""
    run = pattern.match(data, at)
    return run.end() if run is not None else at


def syntax_error(data: bytes, max_tokens: int = MAX_TOKENS) -> str | None:
    """Go's ``json.Unmarshal`` syntax error for ``data``; None when Go's scanner accepts it, or when the
    error lies past ``max_tokens`` tokens (string escapes count as tokens)."""
    try:
        _Scanner(data, max_tokens).scan()
    except _Refused as refused:
        return refused.message
    except _OutOfTokens:
        return None
    return None


def end_of_input(data: bytes) -> str:
    """Go's error for ``data`` that is the start of a JSON text and ends before the text does, found from
    its end alone: where the scanner stands there (in a string, an escape, a number, a literal or between
    tokens) and what one more space does to it."""
    # Inside a string when an odd number of quotes are not escaped (outside strings there are no escapes;
    # pairs of backslashes go first, so each backslash left escapes the byte after it).
    if data.replace(b"\\\\", b"").replace(b'\\"', b"").count(b'"') % 2:
        body = data.rstrip(b"\\")
        if (len(data) - len(body)) % 2:
            return _invalid_end("in string escape code")
        digits = len(body) - len(body.rstrip(_HEX_BYTES))
        if digits <= 3 and body[: len(body) - digits].endswith(b"u"):
            before_u = body[: len(body) - digits - 1]
            if (len(before_u) - len(before_u.rstrip(b"\\"))) % 2:
                return _invalid_end("in \\u hexadecimal character escape")
        return UNEXPECTED_END
    token = data[len(data.rstrip(_TOKEN_BYTES)) :]
    if not token:
        return UNEXPECTED_END
    word = _LITERALS.get(token[0])
    if word is not None:
        if len(token) < len(word):
            return _invalid_end(f"in literal {word.decode()} (expecting {quote_char(word[len(token)])})")
        return UNEXPECTED_END
    last = token[-1:]
    if token == b"-":
        return _invalid_end("in numeric literal")
    if last == b".":
        return _invalid_end("after decimal point in numeric literal")
    if last in (b"e", b"E", b"+", b"-"):
        return _invalid_end("in exponent of numeric literal")
    return UNEXPECTED_END


def _invalid_end(context: str) -> str:
    return f"invalid character ' ' {context}"


class _OutOfTokens(Exception):
    pass


class _Scanner:
    """Go's scanner over ``data``, between tokens a state of :data:`_VALUE` ... :data:`_DONE` and a stack
    of open containers, with a budget of steps (tokens, and escapes within strings)."""

    def __init__(self, data: bytes, max_tokens: int) -> None:
        self.data = data
        self.left = max_tokens

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _OutOfTokens

    def scan(self) -> None:
        data = self.data
        end = len(data)
        stack = bytearray()  # open containers, by their opening byte
        expect = _VALUE
        at = 0
        while True:
            self.spend()
            at = _skip(_SPACE, data, at)
            if at == end:
                if expect == _DONE:
                    return
                raise _Refused(UNEXPECTED_END)
            byte = data[at]
            if expect == _DONE:
                raise _invalid(data, at, "after top-level value")
            if expect == _COLON:
                if byte != 0x3A:  # ':'
                    raise _invalid(data, at, "after object key")
                expect = _VALUE
                at += 1
                continue
            if expect == _NEXT:
                container = stack[-1]
                if byte == 0x2C:  # ','
                    expect = _KEY if container == 0x7B else _VALUE
                    at += 1
                    continue
                if byte != (0x7D if container == 0x7B else 0x5D):  # '}' or ']'
                    raise _invalid(
                        data,
                        at,
                        "after object key:value pair" if container == 0x7B else "after array element",
                    )
                stack.pop()
                at += 1
                expect = _NEXT if stack else _DONE
                continue
            if expect in (_KEY_OR_CLOSE, _KEY):
                if expect == _KEY_OR_CLOSE and byte == 0x7D:  # '}'
                    stack.pop()
                    at += 1
                    expect = _NEXT if stack else _DONE
                    continue
                if byte != 0x22:
                    raise _invalid(data, at, "looking for beginning of object key string")
                at = self.string(at + 1)
                expect = _COLON
                continue
            # _VALUE or _VALUE_OR_CLOSE
            if expect == _VALUE_OR_CLOSE and byte == 0x5D:  # ']'
                stack.pop()
                at += 1
                expect = _NEXT if stack else _DONE
                continue
            if byte in (0x7B, 0x5B):  # '{' '['
                stack.append(byte)
                if len(stack) > MAX_NESTING_DEPTH:
                    raise _invalid(data, at, "exceeded max depth")
                at += 1
                expect = _KEY_OR_CLOSE if byte == 0x7B else _VALUE_OR_CLOSE
                continue
            if byte == 0x22:
                at = self.string(at + 1)
            elif byte == 0x2D or 0x30 <= byte <= 0x39:  # '-' or a digit
                at = _number(data, at)
            elif byte in _LITERALS:
                at = _literal(data, at, _LITERALS[byte])
            else:
                raise _invalid(data, at, "looking for beginning of value")
            expect = _NEXT if stack else _DONE

    def string(self, at: int) -> int:
        """Past the string whose contents start at ``at``."""
        data = self.data
        end = len(data)
        while True:
            self.spend()
            at = _skip(_STRING_RUN, data, at)
            if at == end:
                raise _Refused(UNEXPECTED_END)
            byte = data[at]
            if byte == 0x22:
                return at + 1
            if byte != 0x5C:  # a control character
                raise _invalid(data, at, "in string literal")
            at += 1
            if at < end and data[at] in _SIMPLE_ESCAPES:
                at += 1
                continue
            if at == end or data[at] != 0x75:  # 'u'
                raise _invalid(data, at, "in string escape code")
            first = at + 1
            for index in range(first, first + 4):
                if index == end or data[index] not in _HEX_DIGITS:
                    raise _invalid(data, index, "in \\u hexadecimal character escape")
            at = first + 4


def _number(data: bytes, at: int) -> int:
    """Past the number starting at ``at`` (what follows it is the caller's to judge, as in Go)."""
    end = len(data)
    if data[at] == 0x2D:  # '-'
        at += 1
        if at == end or not 0x30 <= data[at] <= 0x39:
            raise _invalid(data, at, "in numeric literal")
    at = at + 1 if data[at] == 0x30 else _skip(_DIGITS, data, at)
    if at < end and data[at] == 0x2E:  # '.'
        at += 1
        if at == end or not 0x30 <= data[at] <= 0x39:
            raise _invalid(data, at, "after decimal point in numeric literal")
        at = _skip(_DIGITS, data, at)
    if at < end and data[at] in (0x65, 0x45):  # 'e' 'E'
        at += 1
        if at < end and data[at] in (0x2B, 0x2D):  # '+' '-'
            at += 1
        if at == end or not 0x30 <= data[at] <= 0x39:
            raise _invalid(data, at, "in exponent of numeric literal")
        at = _skip(_DIGITS, data, at)
    return at


def _literal(data: bytes, at: int, word: bytes) -> int:
    """Past ``true``, ``false`` or ``null`` starting at ``at``."""
    for offset in range(1, len(word)):
        if at + offset == len(data) or data[at + offset] != word[offset]:
            raise _invalid(
                data, at + offset, f"in literal {word.decode()} (expecting {quote_char(word[offset])})"
            )
    return at + len(word)
