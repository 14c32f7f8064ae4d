using System;

namespace SpindleLib;

/// <summary>
/// Options for <c>SpindleTask.WhenAll</c>: what the BCL's WhenAll does not offer. Every option is off in
/// <c>default(WhenAllOptions)</c>, which behaves as the overloads without options do.
/// </summary>
/// <example><c>await SpindleTask.WhenAll(tasks, new WhenAllOptions { AggregateExceptions = true }, token);</c></example>
/// <remarks>
/// A value type, so passing options allocates nothing. New options are added as further properties whose default means
/// "off", so code written against this version keeps its meaning.
/// </remarks>
public readonly struct WhenAllOptions
{
    /// <summary>
    /// When true, a WhenAll whose inputs failed throws an <see cref="AggregateException"/> holding every failed input's
    /// exception, in input order (cancellations included), instead of only the lowest index's. If every failure is a
    /// cancellation, the combined task is cancelled (it throws the first <see cref="OperationCanceledException"/>), as
    /// without this option. Default: false, the BCL's behaviour for <c>await Task.WhenAll</c>.
    /// </summary>
    public bool AggregateExceptions { get; init; }
}
