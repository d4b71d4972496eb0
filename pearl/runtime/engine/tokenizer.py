"""Byte-level tokenizer for tasks that ship no tokenizer: ids 0..255 are bytes, then specials.

Lossless on any UTF-8 text; `decode` replaces invalid byte sequences (a sampled model can
emit them) instead of raising.
"""

from __future__ import annotations

from dataclasses import dataclass

NUM_BYTES = 256


@dataclass(frozen=True)
class ByteTokenizer:
    """Bytes are their own ids; specials follow: pad, bos, eos, sep (vocab_size 260)."""

    pad_token_id: int = NUM_BYTES
    bos_token_id: int = NUM_BYTES + 1
    eos_token_id: int = NUM_BYTES + 2
    sep_token_id: int = NUM_BYTES + 3

    @property
    def vocab_size(self) -> int:
        return NUM_BYTES + 4

    @property
    def special_ids(self) -> dict[str, int]:
        return {
            "pad": self.pad_token_id,
            "bos": self.bos_token_id,
            "eos": self.eos_token_id,
            "sep": self.sep_token_id,
        }

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        if add_bos:
            ids.insert(0, self.bos_token_id)
        if add_eos:
            ids.append(self.eos_token_id)
        return ids

    def decode(self, ids: list[int], *, skip_special: bool = True) -> str:
        out = bytearray()
        names = {v: k for k, v in self.special_ids.items()}
        for i in ids:
            if 0 <= i < NUM_BYTES:
                out.append(i)
            elif i in names:
                if not skip_special:
                    out.extend(f"<|{names[i]}|>".encode())
            else:
                raise ValueError(f"token id {i} is outside the byte vocabulary")
        return out.decode("utf-8", errors="replace")
