namespace SpindleLib;

/// <summary>
/// What a <see cref="WheelShard"/> links into its slots: a delay's node (<see cref="TimerNode"/>) or a callback timer's
/// (<see cref="CallbackTimerNode"/>). The two share the slot lists, so a shard keeps one wheel for both; the shard tells
/// them apart where it fires or cancels one (an exact type test: both are sealed).
/// </summary>
internal abstract class WheelNode
{
    /// <summary>Next node in the slot list (owner only once linked); a delay's node also uses it in the insert inbox.</summary>
    internal WheelNode? Next;

    /// <summary>Previous node in the slot list (owner only).</summary>
    internal WheelNode? Prev;

    /// <summary>The deadline the node is linked at, in wheel ticks (milliseconds since the wheel's origin, rounded up).</summary>
    internal long Deadline;

    /// <summary>The slot (level * 64 + index) the node is linked in, or -1 (owner only).</summary>
    internal int Slot = -1;
}
