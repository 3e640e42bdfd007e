#!/bin/bash
#SBATCH --job-name=bloom-ft
#SBATCH --nodes=2
#SBATCH --gres=gpu:a100:8
#SBATCH --time=1-12
#SBATCH --partition=gpu
#SBATCH --signal=USR1@120
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=me@example.org

export HOSTFILE=/tmp/hostfile
scontrol show hostnames $SLURM_JOB_NODELIST | sed 's/$/ slots=8/' > $HOSTFILE
deepspeed --hostfile $HOSTFILE --num_nodes 2 --num_gpus 8 finetune.py --deepspeed ds_config.json \
  --checkpoint_dir /data/ckpt/bloom --load_dir /data/ckpt/bloom
