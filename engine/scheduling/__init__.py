"""Which sequences run in each step and where their KV lives: the token budget of the scheduler, the
paged blocks and prefix cache of the block manager, the sequences and batches they share."""
