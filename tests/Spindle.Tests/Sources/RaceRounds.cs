using System;
using System.Collections.Generic;
using System.Diagnostics;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// The rounds loop of the race tests that run on a <see cref="ContinuationRacer"/>: it keeps the racer for the whole run,
/// runs a round after round until the rounds are done, a cap on failing rounds is reached, or a time cap has passed
/// (after a minimum of rounds, if asked), clears the test's process-wide hooks when it stops however it stops, and
/// collects each failing round's message, which names the round. Each round checks its own outcome, so under load a
/// time cap only makes a run shorter; a test whose mutant fails one round in hundreds keeps a minimum instead. Use:
/// <code>
/// var race = new RaceRounds("NameOfTheTests", TestUtil.Stress(20_000)) { TimeCap = TimeSpan.FromSeconds(5), ClearHooks = () => Hook = null };
/// Hook = ...;
/// race.Run(round =&gt; { ... race.Racer.RunBothAtOnce(round, mine, theirs) ...; if (wrong) race.Fail("what went wrong"); });
/// race.AssertNone("what the failures mean");
/// </code>
/// Set the hooks only after building the runner, just before <see cref="Run"/>: a failure in between would leave them set.
/// </summary>
internal sealed class RaceRounds
{
    private readonly string _name;
    private readonly List<string> _failures = new();
    private ContinuationRacer? _racer;

    /// <summary>A run of up to <paramref name="rounds"/> rounds (scaled for the stress tier by the caller); its racing thread is named after <paramref name="name"/>.</summary>
    public RaceRounds(string name, int rounds)
    {
        if (rounds <= 0)
        {
            throw new ArgumentOutOfRangeException(nameof(rounds), rounds, "A race needs at least one round: pass a positive count.");
        }
        _name = name;
        Rounds = rounds;
    }

    /// <summary>The most rounds the run makes.</summary>
    public int Rounds { get; }

    /// <summary>The run stops once this many rounds have failed: 10 by default, 1 to stop at the first.</summary>
    public int MaxFailures { get; init; } = 10;

    /// <summary>No round starts once this much time has passed since <see cref="Run"/> began (past <see cref="MinRounds"/>); null for none.</summary>
    public TimeSpan? TimeCap { get; init; }

    /// <summary>Rounds run whatever the time cap.</summary>
    public int MinRounds { get; init; }

    /// <summary>Clears the test's hooks: runs when the run stops, after the racing thread has ended, whether a round threw or not.</summary>
    public Action? ClearHooks { get; init; }

    /// <summary>The racing thread, while <see cref="Run"/> runs.</summary>
    public ContinuationRacer Racer => _racer ?? throw new InvalidOperationException("The racer exists only while Run runs: use it from a round.");

    /// <summary>The round running (or last run); -1 before the first.</summary>
    public int Round { get; private set; } = -1;

    /// <summary>How many rounds have started.</summary>
    public int Ran { get; private set; }

    /// <summary>The failing rounds' messages, in order.</summary>
    public IReadOnlyList<string> Failures => _failures;

    /// <summary>Records that the round running failed: "round N: " and <paramref name="what"/>.</summary>
    public void Fail(string what) => Fail(Round, what);

    /// <summary>Records that round <paramref name="round"/> failed (a check made after it, or after the run).</summary>
    public void Fail(int round, string what) => _failures.Add($"round {round}: {what}");

    /// <summary>Runs the rounds, each <paramref name="round"/> given its number (from 0, as the racer wants); returns this run.</summary>
    public RaceRounds Run(Action<int> round)
    {
        if (Ran != 0)
        {
            throw new InvalidOperationException("A RaceRounds runs once: make a new one for another run.");
        }
        var cap = Stopwatch.StartNew();
        try
        {
            using var racer = new ContinuationRacer(_name + " racer");
            _racer = racer;
            for (int r = 0; r < Rounds && _failures.Count < MaxFailures && (r < MinRounds || TimeCap is not { } limit || cap.Elapsed < limit); r++)
            {
                Round = r;
                Ran++;
                round(r);
            }
        }
        finally
        {
            _racer = null;
            ClearHooks?.Invoke();
        }
        return this;
    }

    /// <summary>Fails the test if any round failed: <paramref name="what"/>, then the rounds' messages.</summary>
    public void AssertNone(string what)
        => Assert.True(_failures.Count == 0, $"{what}: {string.Join("; ", _failures)}");
}
