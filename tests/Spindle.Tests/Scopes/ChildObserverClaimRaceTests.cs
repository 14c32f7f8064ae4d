using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// A scope counts a child out from the continuation it registers on the child's task (its child observer's Done). Only a
/// user's <see cref="ISpindleSource"/> can run that continuation twice (misuse its <c>OnCompleted</c> contract forbids):
/// Spindle's own sources run it once, and a registration that throws is counted out by <c>ObserveChild</c> only while the
/// observer has not run. Two runs from two threads at once must still count the child out once and refuse the other with
/// the misuse's error: the observer's claim is one exchange. A check of the flag followed by a store of it let both runs
/// through when they met between the two: the child was counted out twice, so a scope with a sibling still running read
/// no children running (and its count went below zero when the sibling finished, so its wait never completed), and
/// neither run was refused. Mutation testing (mut51) found that <c>ContinuationRunTwiceTests</c>' race, two threads
/// released by a Barrier a round apart, met there too seldom to fail with such a claim. Run alone: its two threads must
/// run at once, on the two cores a small machine has.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ChildObserverClaimRaceTests
{
    /// <summary>
    /// Each round, a scope runs a child on a <see cref="RerunningSource"/> and a sibling that stays pending; this thread
    /// and a second one (kept for every round, spinning between them, so that neither is woken from a wait late) then run
    /// the child's continuation at the same moment. One of them, in turn, first spins for a few iterations that sweep
    /// through the rounds, so that the two runs meet at every small offset: the claim's window is a few instructions. Exactly
    /// one run must return and the other throw the misuse's error, and the scope must still count the sibling as running.
    /// </summary>
    [Fact]
    public void TwoRunsAtOnce_OfAChildsContinuation_CountTheChildOutOnce_AndRefuseTheOther()
    {
        int rounds = TestUtil.Stress(100_000);
        var failures = new List<string>();
        var racer = new Racer();
        var thread = new Thread(racer.Loop) { IsBackground = true, Name = "ChildObserverClaimRaceTests racer" };
        thread.Start();
        try
        {
            for (int round = 0; round < rounds && failures.Count < 10; round++)
            {
                var scope = RerunningSource.ScopeWithChildAndSibling(out var source, out var sibling);
                Assert.Equal(2, scope.RunningChildren);
                source.MarkCompleted();

                int jitter = round % 16; // spins before this round's run, on one side or the other
                Exception? mine = null;
                racer.Start(round, source, jitter % 2 == 1 ? jitter / 2 : 0);
                Spin(jitter % 2 == 0 ? jitter / 2 : 0);
                try
                {
                    source.RunAgain();
                }
                catch (Exception ex)
                {
                    mine = ex;
                }
                Exception? theirs = racer.WaitForRun(round);

                int refused = 0;
                foreach (Exception? error in new[] { mine, theirs })
                {
                    if (error is InvalidOperationException ex && ex.Message.Contains("ran a continuation it had already run", StringComparison.Ordinal))
                    {
                        refused++;
                    }
                    else if (error is not null)
                    {
                        throw new InvalidOperationException($"round {round}: a run threw something other than the misuse's error", error);
                    }
                }
                int running = scope.RunningChildren;
                if (refused != 1 || running != 1)
                {
                    // The scope's count is wrong: its wait would never complete, so it is left, not awaited.
                    failures.Add($"round {round}: {refused} of the two runs refused, {running} children counted running (the sibling still runs: 1)");
                    continue;
                }
                sibling.TrySetResult();
                Assert.Equal(0, scope.RunningChildren);
                scope.WaitAsync().GetAwaiter().GetResult(); // every child has finished: it has completed
                scope.DisposeAsync().AsTask().GetAwaiter().GetResult();
            }
        }
        finally
        {
            racer.Stop();
            Assert.True(thread.Join(TimeSpan.FromSeconds(30)), "the racing thread did not end");
        }
        Assert.True(failures.Count == 0, $"two runs of one child's continuation both counted it out: {string.Join("; ", failures)}");
    }

    private static void Spin(int iterations)
    {
        if (iterations > 0)
        {
            Thread.SpinWait(iterations);
        }
    }

    /// <summary>The second thread: spins until a round is posted, runs that round's continuation, posts what it threw.</summary>
    private sealed class Racer
    {
        private const int Stopped = -2;
        private int _round = -1;     // the round posted to run; Stopped to end
        private int _ran = -1;       // the last round run
        private RerunningSource? _source;
        private int _spins;
        private Exception? _error;

        public void Start(int round, RerunningSource source, int spins)
        {
            _source = source;
            _spins = spins;
            Volatile.Write(ref _round, round); // publishes the two fields above
        }

        public Exception? WaitForRun(int round)
        {
            long until = Environment.TickCount64 + 30_000;
            while (Volatile.Read(ref _ran) != round)
            {
                if (Environment.TickCount64 > until)
                {
                    throw new TimeoutException($"round {round}: the racing thread did not run its side within 30 s");
                }
                Pause();
            }
            return _error;
        }

        public void Stop() => Volatile.Write(ref _round, Stopped);

        // On one processor a spin never lets the other thread run (two taskset -c 1 runs hung until their timeout), so
        // there each wait yields: the rounds still check one refusal and one count, though the race itself is rare.
        private static void Pause()
        {
            if (Spinning.Helps)
            {
                Thread.SpinWait(1);
            }
            else
            {
                Thread.Yield();
            }
        }

        public void Loop()
        {
            int last = -1;
            while (true)
            {
                int round = Volatile.Read(ref _round);
                if (round == Stopped)
                {
                    return;
                }
                if (round == last)
                {
                    Pause();
                    continue;
                }
                last = round;
                Spin(_spins);
                Exception? error = null;
                try
                {
                    _source!.RunAgain();
                }
                catch (Exception ex)
                {
                    error = ex;
                }
                _error = error;
                Volatile.Write(ref _ran, round); // publishes _error
            }
        }
    }
}
