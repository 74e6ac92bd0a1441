"""Reports: one self-contained HTML file of what a run, a study or a kernel model did (layer 7).

``simulacra report PATH`` and :func:`build_report` read a society run
directory, a study directory of ``simulacra experiment`` or a monitor file
(``simulacra.monitors.v1``) and write one HTML file that opens offline: the
charts are plotly figures with plotly.js inlined once, the data is embedded
as compact JSON, and the log browser, threads and agent pages are a little
hand-written JavaScript. See ``docs/report.md``.

The data layer (reading and aggregating, no plotting) and the chart builders
(plotly figures) are public, so the live view draws the same charts from the
same numbers:

- report: :func:`build_report` (and :func:`report_path`, where it writes);
- charts: :func:`society_charts` (``actions``, ``calls``, ``tokens``,
  ``cost``, ``failures``, ``latency``, ``queue``, ``probes``, each also a
  function of its own), :func:`study_charts`, :func:`monitor_charts`, and
  :func:`figure_spec` (a figure as the JSON ``Plotly.newPlot`` takes);
- data: :func:`source_kind`, :func:`load_society_run` -> :class:`RunData`,
  :func:`run_identity`, :func:`run_totals`, :func:`step_series` ->
  :class:`StepSeries`, :func:`event_text`, :func:`event_table`,
  :func:`event_page`, :func:`conversation_threads`, :func:`agent_rows`,
  :func:`llm_calls`, :func:`call_stats` -> :class:`CallStats` (``calls.jsonl``),
  :func:`endpoint_rows` -> :class:`EndpointRow` and :func:`endpoint_table`
  (``calls.jsonl`` by endpoint, for a run with ``sim.llm.endpoints``),
  :func:`load_study`, :func:`study_intervals`,
  :func:`load_monitors`.

Layer 7, beside the cli: it imports the standard library, the public
``__init__`` of the layers below (``simulacra.errors``, ``simulacra.llm``,
``simulacra.parallel``, and ``simulacra.societies`` for the one table of a run
directory's file names, ``RUN_FILES``) and, lazily, plotly (the ``report``
extra) and PyYAML. Never the front door ``simulacra``, which re-exports it.
"""

from simulacra._util import claim_public_module

from ._build import DEFAULT_LLM_CALLS as DEFAULT_LLM_CALLS
from ._build import REPORT_FILE as REPORT_FILE
from ._build import build_report as build_report
from ._build import report_path as report_path
from ._charts import PLOTLY_EXTRA as PLOTLY_EXTRA
from ._charts import actions_chart as actions_chart
from ._charts import calls_chart as calls_chart
from ._charts import cost_chart as cost_chart
from ._charts import failures_chart as failures_chart
from ._charts import figure_spec as figure_spec
from ._charts import kind_colors as kind_colors
from ._charts import latency_chart as latency_chart
from ._charts import latency_histogram_chart as latency_histogram_chart
from ._charts import latency_percentiles_chart as latency_percentiles_chart
from ._charts import monitor_charts as monitor_charts
from ._charts import plotly_missing as plotly_missing
from ._charts import probes_chart as probes_chart
from ._charts import queue_chart as queue_chart
from ._charts import society_charts as society_charts
from ._charts import study_charts as study_charts
from ._charts import tokens_chart as tokens_chart
from ._data import MANIFEST_SCHEMES as MANIFEST_SCHEMES
from ._data import MONITOR_KINDS as MONITOR_KINDS
from ._data import MONITORS_FORMAT as MONITORS_FORMAT
from ._data import STUDY_FORMATS as STUDY_FORMATS
from ._data import AgentRow as AgentRow
from ._data import CallStats as CallStats
from ._data import EndpointRow as EndpointRow
from ._data import EventPage as EventPage
from ._data import EventTable as EventTable
from ._data import LLMCall as LLMCall
from ._data import MonitorData as MonitorData
from ._data import MonitorSeries as MonitorSeries
from ._data import RunData as RunData
from ._data import SourceKind as SourceKind
from ._data import StepSeries as StepSeries
from ._data import StudyData as StudyData
from ._data import StudyInterval as StudyInterval
from ._data import Thread as Thread
from ._data import agent_rows as agent_rows
from ._data import call_stats as call_stats
from ._data import conversation_threads as conversation_threads
from ._data import endpoint_rows as endpoint_rows
from ._data import endpoint_table as endpoint_table
from ._data import event_page as event_page
from ._data import event_table as event_table
from ._data import event_text as event_text
from ._data import llm_calls as llm_calls
from ._data import load_monitors as load_monitors
from ._data import load_society_run as load_society_run
from ._data import load_study as load_study
from ._data import read_jsonl as read_jsonl
from ._data import run_identity as run_identity
from ._data import run_totals as run_totals
from ._data import source_kind as source_kind
from ._data import step_series as step_series
from ._data import study_intervals as study_intervals
from ._data import study_parameters as study_parameters
from ._live import LiveView as LiveView  # the live view (simulacra run --view)

__all__ = [
    # the report
    "build_report", "report_path", "REPORT_FILE", "DEFAULT_LLM_CALLS",
    # charts: plotly figures (the report extra)
    "society_charts", "actions_chart", "calls_chart", "tokens_chart", "cost_chart",
    "failures_chart", "latency_chart", "latency_histogram_chart", "latency_percentiles_chart",
    "queue_chart", "probes_chart", "study_charts",
    "monitor_charts", "figure_spec", "kind_colors", "plotly_missing", "PLOTLY_EXTRA",
    # data: reading and aggregating
    "source_kind", "SourceKind", "load_society_run", "RunData", "run_identity", "run_totals",
    "step_series", "StepSeries", "event_text", "event_table", "EventTable", "event_page",
    "EventPage", "conversation_threads", "Thread", "agent_rows", "AgentRow", "llm_calls",
    "LLMCall", "load_study", "StudyData", "study_intervals", "StudyInterval",
    "study_parameters", "load_monitors", "MonitorData", "MonitorSeries", "read_jsonl",
    "call_stats", "CallStats", "endpoint_rows", "EndpointRow", "endpoint_table",
    "MANIFEST_SCHEMES", "STUDY_FORMATS", "MONITORS_FORMAT", "MONITOR_KINDS",
    # the live view: simulacra run --view, simulacra view (see _live.py)
    "LiveView",
]

claim_public_module(__name__, globals())
del claim_public_module
