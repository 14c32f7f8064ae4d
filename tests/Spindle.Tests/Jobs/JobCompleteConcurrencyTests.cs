using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>Complete() called from several threads at once, on one handle and on handles of one DAG.</summary>
public class JobCompleteConcurrencyTests
{
    /// <summary>Writes a plain field: a thread that returns from Complete() must see it.</summary>
    private struct MarkJob : IJob
    {
        public int[] Marks;
        public int Index;
        public int Value;

        public readonly void Execute()
        {
            Marks[Index] = Value;
        }
    }

    [Fact]
    public async Task ManyThreadsCompleteOneBlockedJob_AllReturnAndSeeItDone()
    {
        const int PlainThreads = 6;
        const int Workers = 2;
        using var gate = new Gate();
        var ran = new Counter();
        JobHandle blocked = new GateJob(gate, ran).Schedule();
        JobHandle dependent = new CountJob(ran).Schedule(blocked);
        using var arrived = new CountdownEvent(PlainThreads + Workers);
        var waiters = new Task[PlainThreads + Workers];
        for (int i = 0; i < waiters.Length; i++)
        {
            int me = i;
            Action body = () =>
            {
                arrived.Signal();
                (me % 2 == 0 ? blocked : dependent).Complete();
                Assert.True(blocked.IsCompleted);
                Assert.True(ran.Read() >= 1);
                if (me % 2 == 1)
                {
                    Assert.Equal(2, ran.Read());
                }
            };
            waiters[i] = i < PlainThreads ? TestUtil.RunOnThread(body) : TestUtil.AwaitAsync(Spindle.Run(body));
        }
        try
        {
            Assert.True(arrived.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            gate.WaitStarted();
            Thread.Sleep(50); // let every waiter get into Complete and go to sleep
            for (int i = 0; i < waiters.Length; i++)
            {
                Task w = waiters[i];
                Assert.False(w.IsCompleted,
                    $"waiter {i} ({(i < PlainThreads ? "thread" : "worker")}, completing {(i % 2 == 0 ? "blocked" : "dependent")}) " +
                    $"returned before the gated job was released: {w.Status} {w.Exception?.InnerException}");
            }
        }
        finally
        {
            gate.Release.Set();
        }
        await TestUtil.WithTimeout(Task.WhenAll(waiters));
        Assert.Equal(2, ran.Read());
    }

    [Fact]
    public async Task RacingCompletes_OnHandlesOfOneDag_AllReturnAndSeeTheirAncestorsDone()
    {
        // Each round: a DAG a -> {b, c}, {b, c} -> d (through a combine), and a parallel-for e after a; four racers
        // complete its handles at the same moment, each a different one, and check what it must see.
        const int Racers = 4;
        int rounds = TestUtil.Stress(1_000);
        var marks = new int[5];
        var handles = new JobHandle[6];
        int[] hits = [];
        var error = new InvalidTimeZoneException("root failed");
        int value = 0;

        void Before(int round)
        {
            value = round + 1;
            hits = new int[200];
            Array.Clear(marks);
            JobHandle a = round % 10 == 9
                ? new ThrowJob(error).Schedule()
                : new MarkJob { Marks = marks, Index = 0, Value = value }.Schedule();
            JobHandle b = new MarkJob { Marks = marks, Index = 1, Value = value }.Schedule(a);
            JobHandle c = new MarkJob { Marks = marks, Index = 2, Value = value }.Schedule(a);
            JobHandle bc = JobHandle.CombineDependencies(b, c);
            JobHandle d = new MarkJob { Marks = marks, Index = 3, Value = value }.Schedule(bc);
            JobHandle e = new IndexCountJob(hits).Schedule(hits.Length, 7, a);
            handles[0] = a;
            handles[1] = b;
            handles[2] = bc;
            handles[3] = d;
            handles[4] = e;
            handles[5] = JobHandle.CombineDependencies(d, e);
            if (round % 3 == 0)
            {
                JobHandle.ScheduleBatchedJobs();
            }
        }

        void Racer(int me, int round)
        {
            int which = (me + round) % handles.Length;
            Exception? thrown = JobTestUtil.CompleteCatching(handles[which]);
            bool failed = round % 10 == 9;
            if (failed)
            {
                Assert.Same(error, thrown);
                return;
            }
            Assert.Null(thrown);
            Assert.Equal(value, marks[0]);
            switch (which)
            {
                case 1:
                    Assert.Equal(value, marks[1]);
                    break;
                case 2:
                    Assert.Equal(value, marks[1]);
                    Assert.Equal(value, marks[2]);
                    break;
                case 3:
                    Assert.Equal(value, marks[3]);
                    break;
                case 4:
                    Assert.All(hits, h => Assert.Equal(1, h));
                    break;
                case 5:
                    Assert.Equal(value, marks[3]);
                    Assert.All(hits, h => Assert.Equal(1, h));
                    break;
            }
        }

        void After(int round)
        {
            bool failed = round % 10 == 9;
            foreach (JobHandle h in handles)
            {
                Exception? thrown = JobTestUtil.CompleteCatching(h);
                Assert.Same(failed ? error : null, thrown);
            }
            if (!failed)
            {
                for (int i = 0; i < 4; i++)
                {
                    Assert.Equal(value, marks[i]);
                }
            }
        }

        var racers = new Action<int>[Racers];
        for (int k = 0; k < Racers; k++)
        {
            int me = k;
            racers[k] = round => Racer(me, round);
        }
        await TestUtil.WithTimeout(Race.Run(rounds, Before, After, racers), TestUtil.StressTimeout(60));
    }

    [Fact]
    public async Task ManyAwaitersOnOneBlockedJob_AllResume()
    {
        using var gate = new Gate();
        var ran = new Counter();
        JobHandle blocked = new GateJob(gate, ran).Schedule();
        var awaiters = new Task[64];
        for (int i = 0; i < awaiters.Length; i++)
        {
            awaiters[i] = i % 2 == 0 ? AwaitThenRead(blocked, ran) : TestUtil.AwaitAsync(AwaitThenReadSpindle(blocked, ran));
        }
        gate.WaitStarted();
        gate.Release.Set();
        await TestUtil.WithTimeout(Task.WhenAll(awaiters));

        static async Task AwaitThenRead(JobHandle h, Counter ran)
        {
            await h;
            Assert.Equal(1, ran.Read());
        }

        static async SpindleTask AwaitThenReadSpindle(JobHandle h, Counter ran)
        {
            await h;
            Assert.Equal(1, ran.Read());
        }
    }
}
