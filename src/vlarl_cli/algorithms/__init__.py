"""Pure tensor functions of RL: advantage estimators (registered by name) and PPO losses.

``advantages``: gae / grpo / reinpp / raw, reward and done aggregation, loss masks from dones.
``losses``: PPO actor loss (asymmetric + dual clip), log-prob granularity, masked aggregation, clipped
Huber value loss, KL estimators, entropy, explained variance. No config objects, no modules.
"""
