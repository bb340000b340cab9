"""The tiny preset's byte and FLOP counts, worked out by hand, that the step costs and the roofline bound
are checked against."""

# tiny by hand: attention 64*(64+2*32) + 64*64 = 12288, MLP 3*64*128 = 24576, norms 128 per layer;
# 2 layers + untied embeddings 2*512*64 + final norm 64 = 139584 parameters
TINY_PARAM_BYTES = 139584 * 2
TINY_KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 2  # K and V, layers, kv heads, head dim, bf16
TINY_MATMUL_PARAMS = 139584 - 2 * 512 * 64  # without the embeddings and the LM head
