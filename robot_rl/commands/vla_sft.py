"""`robot-rl vla-sft STORE --out DIR`: LoRA (or full) fine-tuning of pi0 on an episode store (the vla extra).

Under torchrun: `torchrun --nproc_per_node 8 -m robot_rl.cli vla-sft STORE --out DIR ...`.
"""

from __future__ import annotations

import argparse
import os

from robot_rl.commands.common import add_out, resolve_out


def build_parser() -> argparse.ArgumentParser:
    from robot_rl.policies.vla.sft import SFTConfig

    d = SFTConfig()
    p = argparse.ArgumentParser(prog="robot-rl vla-sft", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("store", help="an episode store with language instructions")
    add_out(p, "run folder for checkpoints and the summary", positional_before=True)
    p.add_argument("--base", default=d.base, help="tiny | full | local checkpoint dir (ours, transformers, LeRobot)")
    p.add_argument("--instruction", default=d.instruction, help="override the episodes' instructions")
    p.add_argument("--cameras", default=",".join(d.cameras))
    p.add_argument("--chunk-size", type=int, default=d.chunk_size)
    p.add_argument("--n-action-steps", type=int, default=d.n_action_steps)
    p.add_argument("--finetune", choices=("lora", "full"), default=d.finetune)
    p.add_argument("--lora-r", type=int, default=d.lora.r)
    p.add_argument("--lora-alpha", type=float, default=d.lora.alpha)
    p.add_argument("--lora-vision", action="store_true")
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--grad-accum", type=int, default=d.grad_accum)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--val-every", type=int, default=d.val_every)
    p.add_argument("--save-every", type=int, default=d.save_every)
    p.add_argument("--no-bf16", action="store_true")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--from-disk", action="store_true", help="read windows from the store instead of RAM")
    p.add_argument("--device", default=d.device)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    return p


def main(argv: list[str]) -> int:
    import torch
    import torch.distributed as dist

    from robot_rl.policies.vla.lora import LoraSettings
    from robot_rl.policies.vla.sft import SFTConfig, train_sft

    p = build_parser()
    a = p.parse_args(argv)
    resolve_out(p, a)
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = SFTConfig(
        store=a.store, out=str(a.out), base=a.base, instruction=a.instruction, cameras=tuple(a.cameras.split(",")),
        chunk_size=a.chunk_size, n_action_steps=a.n_action_steps, finetune=a.finetune,
        lora=LoraSettings(r=a.lora_r, alpha=a.lora_alpha, vision=a.lora_vision), steps=a.steps,
        batch_size=a.batch_size, grad_accum=a.grad_accum, lr=a.lr, val_every=a.val_every, save_every=a.save_every,
        bf16=not a.no_bf16, gradient_checkpointing=a.gradient_checkpointing, in_ram=not a.from_disk,
        device=a.device, seed=a.seed,
    )  # fmt: skip
    _, summary = train_sft(cfg)
    if int(os.environ.get("RANK", "0")) == 0:
        print(summary["checkpoint"])
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0
