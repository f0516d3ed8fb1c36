# Megatron-LM arguments: llama3-8b on 8 GPUs of h100-offload-512g
# planner strategy: tp=1 pp=1 dp=8 mb=2 none ZeRO-1 offload O→T1
# flags as in Megatron-LM main @ d98e8a64dd (2026-08-22); add the data, tokenizer and optimizer flags
torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py \
    --num-layers 32 \
    --hidden-size 4096 \
    --ffn-hidden-size 14336 \
    --num-attention-heads 32 \
    --group-query-attention \
    --num-query-groups 8 \
    --swiglu \
    --untie-embeddings-and-output-weights \
    --normalization RMSNorm \
    --position-embedding-type rope \
    --rotary-base 500000 \
    --disable-bias-linear \
    --hidden-dropout 0 \
    --attention-dropout 0 \
    --padded-vocab-size 128256 \
    --seq-length 8192 \
    --max-position-embeddings 8192 \
    --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 1 \
    --context-parallel-size 1 \
    --micro-batch-size 2 \
    --global-batch-size 64 \
    --use-distributed-optimizer \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --optimizer-cpu-offload \
    --use-precision-aware-optimizer \
    --bf16 \
    --accumulate-allreduce-grads-in-fp32 \
    --attention-backend fused
