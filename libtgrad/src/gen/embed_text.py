"""Build step: a text file as a C string, so a device prelude (kernels/gpu/*.h) ships inside
libtgrad and the renderer pastes it into kernels verbatim.

    python embed_text.py INPUT OUTPUT SYMBOL

writes OUTPUT, a C file defining `const char SYMBOL[]` with INPUT's bytes (UTF-8 text, one
string literal per line so the generated file stays readable)."""

import sys


def c_literal(line: str) -> str:
    out = []
    for ch in line:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            raise SystemExit(f"embed_text: {ch!r} is not printable ASCII; keep device preludes ASCII")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def main() -> None:
    src, dst, symbol = sys.argv[1:4]
    with open(src, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    body = "\n".join("    " + c_literal(line) for line in lines) or '    ""'
    with open(dst, "w", encoding="utf-8") as f:
        f.write(f"/* Generated from {src.rsplit('/', 1)[-1]} by embed_text.py at build time. Do not edit. */\n")
        f.write(f"const char {symbol}[] =\n{body};\n")


if __name__ == "__main__":
    main()
