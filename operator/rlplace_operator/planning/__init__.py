"""An RLJob and its live cluster -> its Plan (plan), and the closed loop's recommendation and re-placement from the
step times it reports (recommend)."""
