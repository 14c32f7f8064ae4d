using System;

namespace SpindleLib.Tests.Threading;

/// <summary>A work item that runs an action: for tests that drive a <see cref="WorkerPool"/> directly with items.</summary>
internal sealed class ActionItem : WorkItem
{
    private readonly Action _action;

    public ActionItem(Action action) => _action = action;

    public override void Execute() => _action();
}
