"""The Plan page's parts: presets, the model and its calibration, a unit profile, Verify, the robustness table."""
