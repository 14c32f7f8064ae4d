using System;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// The injection queue and the jobs' queue taken in turn (user16, <see cref="SharedQueueTurnsTests"/>) lose nothing and
/// run nothing twice: threads outside the workers fill both at once, some of them taking their jobs back with
/// <c>Complete()</c> as they go (the takes that make a spinning worker's look at the jobs patient), while the workers
/// alternate between the two queues. Review48 of user16's change, which reorders a worker's takes from the two queues.
/// </summary>
[Collection(SequentialCollection.Name)]
public class SharedQueueTurnsStressTests
{
    private struct CountJob : IJob
    {
        public int[] Counters;
        public int Id;

        public readonly void Execute() => Interlocked.Increment(ref Counters[Id]);
    }

    [Fact]
    public async Task RunsAndJobsQueuedTogetherFromOutside_EachRunsExactlyOnce()
    {
        const int Producers = 4;
        int perProducer = TestUtil.Stress(20_000);
        var counters = new int[Producers * perProducer];

        var producers = new Task[Producers];
        for (int p = 0; p < Producers; p++)
        {
            int producer = p;
            producers[p] = TestUtil.RunOnThread(() =>
            {
                var runs = new SpindleTask[perProducer];
                var jobs = new JobHandle[perProducer];
                bool takesBack = producer % 2 == 0; // half the producers complete each batch of jobs at once: outside takes
                for (int i = 0; i < perProducer; i++)
                {
                    int id = producer * perProducer + i;
                    if (i % 2 == 0)
                    {
                        runs[i] = Spindle.Run(() => Interlocked.Increment(ref counters[id])); // the injection queue
                    }
                    else
                    {
                        jobs[i] = new CountJob { Counters = counters, Id = id }.Schedule(); // the jobs' queue, once flushed
                    }
                    if (i % 32 == 31)
                    {
                        JobHandle.ScheduleBatchedJobs();
                        if (takesBack)
                        {
                            jobs[i].Complete();
                        }
                    }
                }
                JobHandle.ScheduleBatchedJobs();
                for (int i = 0; i < perProducer; i++)
                {
                    if (i % 2 == 0)
                    {
                        runs[i].GetAwaiter().GetResult();
                    }
                    else
                    {
                        jobs[i].Complete();
                    }
                }
            }, "producer " + p);
        }

        await TestUtil.WithTimeout(Task.WhenAll(producers), TestUtil.StressTimeout(90));

        int missing = counters.Count(c => c == 0);
        int duplicated = counters.Count(c => c > 1);
        Assert.True(missing == 0 && duplicated == 0, $"{missing} runs or jobs never ran, {duplicated} ran more than once (of {counters.Length})");
    }
}
