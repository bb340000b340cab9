"""What a run's rows add up to: request metrics under vLLM's names, step statistics, the roofline bound,
and small-sample statistics over trials."""
