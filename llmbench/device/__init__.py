"""The machine a run is on: its software and hardware, its GPU clock (NVML) and its measured ceilings."""
