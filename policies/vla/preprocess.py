"""Our own VLA input pipeline: camera frames -> pixel tensors, instruction -> prefix token ids.

Nothing here needs a model hub, PIL or transformers' processors: images go through torch, text through a
`tokenizers` tokenizer read from the checkpoint directory (PaliGemma's `tokenizer.json` for real pi0
checkpoints) or, for tiny test configs, a byte-level one built in code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

__all__ = ["preprocess_images", "PromptTokenizer", "clean_instruction"]

TOKENIZER_FILE = "tokenizer.json"
_PROMPT_FILE = "prompt_tokenizer.json"


def preprocess_images(frames: Sequence[torch.Tensor], size: int) -> torch.Tensor:
    """Camera frames (each (B, H, W, 3) uint8) -> (B, n_cams, 3, size, size) float32 in [-1, 1].

    Resize keeping the aspect ratio, then pad with black on the left/top to a square (LeRobot/openpi pi0's
    `resize_with_pad`), then map [0, 1] -> [-1, 1] (SigLIP's mean = std = 0.5).
    """
    out = []
    for f in frames:
        if f.ndim != 4 or f.shape[-1] != 3:
            raise ValueError(f"expected (B, H, W, 3) frames, got {tuple(f.shape)}")
        x = f.permute(0, 3, 1, 2).float() / 255.0
        h, w = x.shape[-2:]
        if (h, w) != (size, size):
            scale = size / max(h, w)
            nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
            x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False, antialias=True).clamp(0, 1)
            x = F.pad(x, (size - nw, 0, size - nh, 0), value=0.0)
        out.append(x * 2.0 - 1.0)
    return torch.stack(out, dim=1)


def clean_instruction(text: str) -> str:
    """openpi's prompt cleaning: one line, underscores as spaces."""
    return text.strip().replace("_", " ").replace("\n", " ")


def byte_level_tokenizer() -> Tokenizer:
    """A 259-token byte-level tokenizer (0 <pad>, 1 <eos>, 2 <bos>, then the 256 bytes), built offline.

    PaliGemma puts <pad>, <eos>, <bos> at the same ids, so prompts are laid out identically.
    """
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, **{c: i + 3 for i, c in enumerate(alphabet)}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<pad>", "<eos>", "<bos>"])
    return tok


class PromptTokenizer:
    """Instruction -> pi0 prefix: [image placeholders] <bos> text "\\n" <pad>... with a fixed text length.

    The layout is transformers' `PI0Processor` (image tokens first, then <bos>, the prompt and a newline); the
    text part is right-padded / truncated to `max_text_len` tokens so every batch has the same prefix length.
    Encodings are cached per instruction: a task has one fixed instruction, so the actor never re-tokenizes.
    """

    def __init__(self, tokenizer: Tokenizer, max_text_len: int = 48) -> None:
        self.tok = tokenizer
        self.max_text_len = max_text_len
        self.bos_id = self._special("<bos>", 2)
        self.pad_id = self._special("<pad>", 0)
        self._cache: dict[str, list[int]] = {}

    def _special(self, token: str, default: int) -> int:
        i = self.tok.token_to_id(token)
        return default if i is None else int(i)

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    @classmethod
    def byte_level(cls, max_text_len: int = 48) -> PromptTokenizer:
        return cls(byte_level_tokenizer(), max_text_len)

    @classmethod
    def from_dir(cls, path: str | Path, max_text_len: int | None = None) -> PromptTokenizer:
        """Load `tokenizer.json` from a checkpoint directory (the text length from our own side file if any)."""
        path = Path(path)
        if not (path / TOKENIZER_FILE).is_file():
            raise FileNotFoundError(f"no {TOKENIZER_FILE} in {path}")
        saved = json.loads((path / _PROMPT_FILE).read_text()) if (path / _PROMPT_FILE).is_file() else {}
        n = max_text_len or int(saved.get("max_text_len", 48))
        return cls(Tokenizer.from_file(str(path / TOKENIZER_FILE)), n)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.tok.save(str(path / TOKENIZER_FILE))
        (path / _PROMPT_FILE).write_text(json.dumps({"max_text_len": self.max_text_len}))

    def text_ids(self, text: str) -> list[int]:
        """<bos> + prompt + "\\n", truncated to max_text_len (the newline is kept)."""
        if text not in self._cache:
            body = self.tok.encode(clean_instruction(text), add_special_tokens=False).ids
            nl = self.tok.encode("\n", add_special_tokens=False).ids
            ids = [self.bos_id, *body][: self.max_text_len - len(nl)] + nl
            self._cache[text] = ids
        return self._cache[text]

    def encode(
        self, texts: Sequence[str], n_image_tokens: int, image_token_id: int, device: torch.device | str = "cpu"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids (B, L) int64, attention_mask (B, L) int64) with L = n_image_tokens + max_text_len."""
        n = len(texts)
        ids = torch.full((n, n_image_tokens + self.max_text_len), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        ids[:, :n_image_tokens] = image_token_id
        mask[:, :n_image_tokens] = 1
        for i, t in enumerate(texts):
            tid = self.text_ids(t)
            ids[i, n_image_tokens : n_image_tokens + len(tid)] = torch.tensor(tid)
            mask[i, n_image_tokens : n_image_tokens + len(tid)] = 1
        return ids.to(device), mask.to(device)
