"""timm VisionTransformer arguments of the fused backbone's towers at the checkpoint's (tiny) sizes: DINOv2
with registers (no class-token position, LayerScale) and SigLIP (no class token, attention-pool head)."""

from typing import Any


def tower_kwargs(v: dict[str, Any], dino: bool) -> dict[str, Any]:
    common = {"img_size": v["image_size"], "patch_size": v["patch_size"], "num_classes": 0}
    if dino:
        return {**common, "embed_dim": v["dino_width"], "depth": v["dino_depth"], "num_heads": v["dino_heads"],
                "mlp_ratio": v["dino_mlp_ratio"], "init_values": 1e-5, "reg_tokens": v["dino_registers"],
                "no_embed_class": True}
    # timm sizes the MLP as int(width * ratio): nudge the ratio so that int() gives siglip_mlp exactly
    return {**common, "embed_dim": v["siglip_width"], "depth": v["siglip_depth"], "num_heads": v["siglip_heads"],
            "mlp_ratio": (v["siglip_mlp"] + 0.5) / v["siglip_width"], "class_token": False, "global_pool": "map"}
