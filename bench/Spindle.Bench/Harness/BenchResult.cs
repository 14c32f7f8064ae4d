namespace SpindleLib.Bench.Harness;

/// <summary>
/// One measured figure. <see cref="Scenario"/>, <see cref="System"/> and <see cref="Metric"/> are a contract that other
/// tools read (see DESIGN.md): keep their spellings stable.
/// </summary>
/// <param name="Scenario">The scenario id, e.g. <c>sequential</c>.</param>
/// <param name="Case">The case within the scenario, e.g. <c>units=1000</c>.</param>
/// <param name="System">The system measured, e.g. <c>Task</c> or <c>Spindle</c>.</param>
/// <param name="Metric">The metric, e.g. <c>ns_per_op</c>.</param>
/// <param name="Value">The median over the rounds.</param>
/// <param name="Spread">Half the min–max range over the rounds, as a fraction of the median (0.05 = ±5%); null for single-shot figures.</param>
/// <param name="Rounds">How many rounds the median is over.</param>
public sealed record BenchResult(string Scenario, string Case, string System, string Metric, double Value, double? Spread, int Rounds);
