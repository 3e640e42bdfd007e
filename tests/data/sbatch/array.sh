#!/bin/bash
#SBATCH --job-name=tr1-13B
#SBATCH --nodes=32
#SBATCH --ntasks-per-node=1          # crucial - only 1 task per dist per node!
#SBATCH --cpus-per-task=40
#SBATCH --hint=nomultithread
#SBATCH --gres=gpu:4
#SBATCH --time 20:00:00
#SBATCH --output=%x-%j.out
#SBATCH --account=six@gpu
#SBATCH --array=1-10%1

set -x -e
source $six_ALL_CCFRWORK/start-prod
export NCCL_DEBUG=WARN
cd /gpfswork/rech/six/commun/code/Megatron-DeepSpeed

export LAUNCHER="python -u -m torch.distributed.launch --nproc_per_node 4 --nnodes $SLURM_NNODES"
srun --jobid $SLURM_JOBID bash -c '$LAUNCHER --node_rank $SLURM_PROCID pretrain_gpt.py --save /ckpt/tr1 --load /ckpt/tr1'
