"""plotly figures (they draw what they are given) and their export."""
