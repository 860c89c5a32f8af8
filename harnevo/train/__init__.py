"""The training stage: teach a harness to a small open model (thin over TRL, transformers, peft, datasets).

    collect   teacher episodes under a harness -> a chat dataset (harnevo.train.collect)
    sft       TRL SFTTrainer on it, loss on the reply only, optional LoRA (harnevo.train.sft)
    grpo      TRL GRPOTrainer, multi-turn rollouts in the engine, cost-aware reward (harnevo.train.grpo)
    distill   a supervisor under the harness corrects a student under `minimal` (harnevo.train.distill)
    rewards   the cost-aware reward as plain functions (harnevo.train.rewards)
    config    one validated config per stage (harnevo.train.config)

Importing this package imports nothing heavy; each stage's module imports torch/TRL when it runs."""
