# Megatron-LM arguments: gpt3-175b on 1024 GPUs of dgx-a100-80g
# planner strategy: tp=8 pp=16 dp=8 mb=1 v=2 selective+SP
# flags as in Megatron-LM main @ d98e8a64dd (2026-08-22); add the data, tokenizer and optimizer flags
# 128 nodes × 8 GPUs: run the torchrun line on every node, MASTER_ADDR the first node's address; under Slurm (sbatch --nodes 128 --ntasks-per-node 1 --gpus-per-node 8):
#   export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
#   srun --nodes 128 --ntasks-per-node 1 bash <this file>
export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron-LM's validate_args asserts it with tp > 1 or cp > 1 before Blackwell
torchrun --nnodes 128 --nproc-per-node 8 --rdzv-id planner --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500 pretrain_gpt.py \
    --num-layers 96 \
    --hidden-size 12288 \
    --ffn-hidden-size 49152 \
    --num-attention-heads 96 \
    --padded-vocab-size 51200 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 16 \
    --context-parallel-size 1 \
    --num-layers-per-virtual-pipeline-stage 3 \
    --sequence-parallel \
    --micro-batch-size 1 \
    --global-batch-size 1536 \
    --recompute-granularity selective \
    --overlap-grad-reduce \
    --bf16 \
    --accumulate-allreduce-grads-in-fp32 \
    --attention-backend fused
