using System;
using System.Collections.Generic;
using System.Linq;

namespace SpindleLib.Tests.Scenarios;

/// <summary>What the scenario tests read the way a user would: the task tracker.</summary>
internal static class ScenarioSupport
{
    /// <summary>The tracked tasks (suspended, or finished and never read) whose method belongs to <paramref name="owner"/>.</summary>
    public static List<string> TrackedIn(Type owner)
        => SpindleDiagnostics.GetTrackedTasks().Where(t => t.Method.Contains(owner.Name, StringComparison.Ordinal)).Select(t => t.ToString()).ToList();
}
