"""How well the cost model predicts measured training runs: predicted vs measured step time and
leave-one-source-out cross-validation (validation), and fitting a stack profile's efficiency
parameters to runs (calibration)."""
