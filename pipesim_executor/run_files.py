"""The run folder: the contract between the launcher (host side) and the ranks (rank side), and with anyone who
follows a run from its folder. Both sides import these names; pipesim_executor.host.run_folder reads and writes the
folder.

    runs/NAME/
      config.json      RunConfig.to_dict()            (launcher writes, workers read)
      schedule.json    pipesim.io.formats schedule doc (launcher writes, workers read)
      measured.json    measured Timeline doc + step_times_ms, losses, peak_memory_bytes (rank 0 writes;
                       with data parallelism, replica 0's ranks)
      cost.json        pipesim cost file from the profile phase (rank 0 writes, with --profile); in the folder of
                       `executor profile`, the model profiled per unit (version 2)
      profile_request.json  `executor profile`'s sizes, optimizers and repetitions (launcher writes, ranks read)
      simulated.json   the prediction: the schedule simulated with cost.json (launcher writes)
      analysis.json    where the measured step went, per rank (launcher writes)
      reference.json   torch.distributed.pipelining step times and losses (with --reference)
      trace.json       Chrome trace: simulated and measured step, flows per message (launcher writes)
      traces/          torch.profiler (Kineto) traces of the measured steps, rankR.json and, from the
                       reference run, torch-rankR.json (with --torch-profile)
      plan-prediction.json  a verified plan's prediction for this candidate, and what it rests on (verify-plan)
      result.json      status, message, timings, prediction error (launcher writes last; node K of a
                       multi-node run writes result-nodeK.json)
      progress.json    the launcher's pid, progress, latest events and log lines (launcher, while it runs)
      cancel           written by whoever cancels the run; the launcher watches for it
      stop             written by the launcher to ask the ranks to stop after the step in progress
      logs/            one log per rank
"""

from __future__ import annotations

CONFIG_FILE = "config.json"
SCHEDULE_FILE = "schedule.json"
MEASURED_FILE = "measured.json"
COST_FILE = "cost.json"
PROFILE_REQUEST_FILE = "profile_request.json"
SIMULATED_FILE = "simulated.json"
ANALYSIS_FILE = "analysis.json"
REFERENCE_FILE = "reference.json"
TRACE_FILE = "trace.json"  # the run's Perfetto view: simulated and measured of the last step, with flows
TRACES_DIR = "traces"  # the run folder's torch.profiler traces (pipesim_executor.rank.torch_profile writes them)
RESULT_FILE = "result.json"
# The doctor's folder holds runs, not a run: this file, written when the doctor starts and holding its report when
# it ends, keeps it out of the run listings (the command line's and the app's) instead of a "damaged" row.
DOCTOR_FILE = "doctor.json"
# A plan's prediction for the candidate this run verifies (pipesim_executor.host.verify writes it), so the Run page
# shows the same prediction, error and calibration as the Plan page's verification.
PLAN_PREDICTION_FILE = "plan-prediction.json"
LOGS_DIR = "logs"
# A file the launcher writes into the run folder to ask the ranks to stop after the step in progress and write
# what they measured (a cancel); the ranks agree on it at each step boundary.
STOP_FILE = "stop"
# A file anyone may write into the run folder to cancel the run (`python -m executor cancel`, the app of another
# server): the launcher's watch loop takes it as its own cancel (pipesim_executor.host.launch,
# pipesim_executor.host.watch).
CANCEL_FILE = "cancel"
# The launcher's view of its run, rewritten atomically about every PROGRESS_EVERY_S while it runs: its pid, the
# progress fraction, the latest events and log lines (pipesim_executor.host.run_folder writes and reads it).
PROGRESS_FILE = "progress.json"
PROGRESS_EVERY_S = 0.5


def result_file(node_rank: int) -> str:
    """The result file of one node's launcher: node 0's is the run's result.json."""
    return RESULT_FILE if node_rank == 0 else f"result-node{node_rank}.json"
