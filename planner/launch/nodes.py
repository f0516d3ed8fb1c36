"""How a launch runs on several nodes: whole nodes of the system's size, torchrun's rendezvous
flags, and the comment lines that say how to start the same command on every node (by hand or
under Slurm). Shared by the Megatron-LM, NeMo and torchtitan writers."""

from __future__ import annotations

RENDEZVOUS_PORT = 29500
"""torchrun's c10d rendezvous port on the first node (torchtitan's multinode_trainer.slurm)."""
FIRST_NODE = "export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)"
"""Under Slurm, the first node of the allocation: the rendezvous host every node dials."""


def node_layout(gpus: int, per_node: int) -> tuple[int, int]:
    """(nodes, processes per node) for ``gpus`` on nodes of ``per_node`` GPUs: whole nodes, or
    one node running every process where ``gpus`` is not a multiple (the emitter says so)."""
    return (gpus // per_node, per_node) if gpus % per_node == 0 else (1, gpus)


def torchrun(nodes: int, per_node: int) -> str:
    """torchrun's launcher flags for ``nodes`` × ``per_node`` processes: on many nodes a c10d
    rendezvous at ``$MASTER_ADDR:29500``, so the same line runs on every node (PyTorch's
    torch.distributed.run; torchtitan's multinode_trainer.slurm at v0.2.2 launches so)."""
    line = f"torchrun --nnodes {nodes} --nproc-per-node {per_node}"
    if nodes > 1:
        line += (
            f" --rdzv-id planner --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:{RENDEZVOUS_PORT}"
        )
    return line


def multi_node_comments(nodes: int, per_node: int, command: str) -> list[str]:
    """Comment lines saying how ``command`` (a torchrun line) runs on ``nodes`` nodes: the
    same line on each node, MASTER_ADDR the first node's address; under Slurm, one task per
    node from an sbatch script."""
    if nodes == 1:
        return []
    return [
        f"# {nodes} nodes × {per_node} GPUs: run the torchrun line on every node, MASTER_ADDR "
        "the first node's address; under Slurm (sbatch --nodes "
        f"{nodes} --ntasks-per-node 1 --gpus-per-node {per_node}):",
        f"#   {FIRST_NODE}",
        f"#   srun --nodes {nodes} --ntasks-per-node 1 {command}",
    ]
