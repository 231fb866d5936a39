"""A small config of the real architecture whose shapes exercise every code path quickly."""

IMAGE = 7  # image token id of these small configs

SMALL = dict(
    sam_image_size=128,  # learned grid 8 x 8, so other sizes exercise the interpolations
    sam_hidden_size=16,
    sam_num_layers=2,
    sam_num_heads=2,
    sam_mlp_dim=32,
    sam_window_size=3,  # grids of 8 and 12 are padded to a multiple of 3
    sam_global_attn_indexes=[1],
    sam_out_channels=8,
    sam_downsample_channels=[12, 16],
    clip_hidden_size=16,
    clip_num_layers=2,
    clip_num_heads=2,
    clip_intermediate_size=24,
    clip_image_size=56,
    clip_patch_size=14,  # CLIP's learned grid is 4 x 4
    vocab_size=40,
    hidden_size=24,
    intermediate_size=40,
    moe_intermediate_size=8,
    num_hidden_layers=3,
    num_attention_heads=2,
    num_key_value_heads=2,
    n_routed_experts=6,
    n_shared_experts=2,
    num_experts_per_tok=3,
    image_token_id=IMAGE,
    rope_theta=10000.0,
)
