using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using CsCheck;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Random job DAGs (CsCheck, which shrinks a failure to a smallest program) built with the public API only, checked
/// against a model of the job system's documented contract. A program mixes <see cref="IJob"/>,
/// <see cref="IJobParallelFor"/> and <see cref="IJobParallelForBatch"/> jobs (lengths from 0, batch sizes above the
/// length), dependencies given as single handles or as <see cref="JobHandle.CombineDependencies(JobHandle, JobHandle)"/>
/// of two, three or a span (nested, with default and repeated handles), failing jobs and failing parallel-for elements,
/// and jobs scheduled concurrently from the test thread, a plain thread, a Spindle worker and from inside running jobs.
/// Handles are flushed at random points or never, completed, polled and awaited (<c>await handle</c> and
/// <see cref="JobHandle.AsSpindleTask"/>) at random points, from those threads, and all completed at the end in a
/// random order. Every job and element records a start and an end sequence number. Checked:
/// <list type="bullet">
/// <item>every job and every parallel-for element runs exactly once if nothing upstream failed, never if something
/// did; in a failing parallel-for, at most once, and the failing element once;</item>
/// <item>no job or element starts before every job it depends on (through combined handles) has ended;</item>
/// <item>when <see cref="JobHandle.Complete"/> returns, <see cref="JobHandle.IsCompleted"/> reads true, or an await
/// resumes, the job and every job upstream of it that runs has ended, and nothing of them starts afterwards;</item>
/// <item>Complete() and await rethrow the job's own exception if it ran and failed, else one of the exceptions of the
/// failed jobs upstream of it, and nothing if nothing failed; the same on every later Complete();</item>
/// <item>at the end every handle reads completed and every await has resumed (generous bounds, no timing assertion);</item>
/// <item>a batch job's batches are aligned on the batch size and as long as the documented split says.</item>
/// </list>
/// </summary>
public class JobDagModelTests
{
    private const int KindJob = 0;
    private const int KindFor = 1;
    private const int KindBatch = 2;

    private const int OnMain = 0;
    private const int OnThread = 1;
    private const int OnWorker = 2;

    /// <summary>
    /// One scheduled job. <c>Deps</c> are raw: -1 is a default handle, any other value d names job d % index (so
    /// repeats are common). <c>Form</c> picks how the dependency handles are combined.
    /// </summary>
    private sealed record Spec(
        int Kind, int Len, int Batch, bool Fails, int FailAt, int[] Deps, int Form,
        int Sched, int After, int Target, int Await, bool Child, bool ChildFails, int ChildMask)
    {
        public override string ToString()
        {
            string kind = Kind switch { KindJob => "job", KindFor => $"for({Len},{Batch})", _ => $"batch({Len},{Batch})" };
            string fail = !Fails ? "" : Kind == KindJob ? "!" : $"!@{FailAt}";
            string sched = Sched switch { OnMain => "", OnThread => " @thread", _ => " @worker" };
            string after = After switch { 1 => " flush", 2 => $" complete~{Target}", 3 => $" poll~{Target}", _ => "" };
            string wait = Await switch { 1 => " await", 2 => " asTask", _ => "" };
            string child = Child ? $" child{(ChildFails ? "!" : "")}/{ChildMask}" : "";
            return $"{kind}{fail} deps[{string.Join(",", Deps)}]/f{Form}{sched}{after}{wait}{child}";
        }
    }

    private static readonly Gen<Spec> SpecGen =
        Gen.Select(
            Gen.Int[0, 2],
            Gen.Int[0, 40],
            Gen.Int[1, 50],
            Gen.Frequency((7, Gen.Const(false)), (1, Gen.Const(true))),
            Gen.Int[0, 39],
            Gen.Int[-1, 999].Array[0, 5],
            Gen.Int[0, 3])
        .SelectMany(a => Gen.Select(
            Gen.Frequency((3, Gen.Const(OnMain)), (1, Gen.Const(OnThread)), (1, Gen.Const(OnWorker))),
            Gen.Frequency((4, Gen.Const(0)), (1, Gen.Const(1)), (1, Gen.Const(2)), (1, Gen.Const(3))),
            Gen.Int[0, 999],
            Gen.Frequency((4, Gen.Const(0)), (1, Gen.Const(1)), (1, Gen.Const(2))),
            Gen.Frequency((5, Gen.Const(false)), (1, Gen.Const(true))),
            Gen.Frequency((3, Gen.Const(false)), (1, Gen.Const(true))),
            Gen.Int[0, 255],
            (sched, after, target, wait, child, childFails, mask) => new Spec(
                a.Item1, a.Item2, a.Item3, a.Item4, a.Item5, a.Item6, a.Item7, sched, after, target, wait, child, childFails, mask)));

    private static readonly Gen<(Spec[] Program, bool Watch, int Seed)> Cases =
        Gen.Select(SpecGen.Array[1, 20], Gen.Frequency((3, Gen.Const(false)), (1, Gen.Const(true))), Gen.Int);

    [Fact]
    public void RandomDags_MatchTheModel()
        => Cases.Sample((Spec[] program, bool watch, int seed) => { new World(program, watch, seed).Run(); },
            iter: TestUtil.Stress(300), threads: 1,
            print: static c => string.Join(" | ", c.Item1.Select(static (s, i) => $"{i}:{s}")) + $" (watch {c.Item2}, seed {c.Item3})");

    /// <summary>One run of a program: the model, the records the jobs write, and the checks.</summary>
    private sealed class World
    {
        private readonly Spec[] _specs;
        private readonly bool _watch;
        private readonly int _seed;
        private readonly int _n; // main jobs are 0..n-1, the child of job i is n + i

        // The model.
        private readonly int[][] _deps; // direct dependencies (distinct job indices) of each main job
        private readonly bool[] _runs; // the job runs (nothing upstream failed; a child: its parent runs)
        private readonly bool[] _ownFault; // the job runs and fails
        private readonly HashSet<int>[] _upstreamFailures;
        private readonly HashSet<int>[] _closure; // the main jobs upstream of each main job, itself included

        // The records.
        private long _seq;
        private readonly int[] _runCount;
        private readonly long[] _start;
        private readonly long[] _end;
        private readonly int[][] _elemRuns;
        private readonly long[][] _elemStart;
        private readonly long[][] _elemEnd;
        private readonly Exception[] _errors;
        private readonly JobHandle[] _handles;
        private readonly int[] _published;
        private readonly ConcurrentQueue<string> _failures = new();
        private readonly ConcurrentQueue<(int Job, long Seq, string How)> _observations = new();
        private readonly ConcurrentQueue<Task> _awaits = new();

        public World(Spec[] specs, bool watch, int seed)
        {
            _specs = specs;
            _watch = watch;
            _seed = seed;
            _n = specs.Length;
            int total = 2 * _n;
            _deps = new int[_n][];
            _runs = new bool[total];
            _ownFault = new bool[total];
            _upstreamFailures = new HashSet<int>[total];
            _closure = new HashSet<int>[_n];
            _runCount = new int[total];
            _start = new long[total];
            _end = new long[total];
            _elemRuns = new int[_n][];
            _elemStart = new long[_n][];
            _elemEnd = new long[_n][];
            _errors = new Exception[total];
            _handles = new JobHandle[total];
            _published = new int[_n];
            for (int i = 0; i < total; i++)
            {
                _errors[i] = new InvalidOperationException((i < _n ? "job " + i : "child of job " + (i - _n)) + " failed");
                _upstreamFailures[i] = new HashSet<int>();
            }
            for (int i = 0; i < _n; i++)
            {
                Spec s = specs[i];
                _deps[i] = RawDeps(i).Where(static d => d >= 0).Distinct().OrderBy(static d => d).ToArray();
                _closure[i] = new HashSet<int> { i };
                foreach (int d in _deps[i])
                {
                    _closure[i].UnionWith(_closure[d]);
                    _upstreamFailures[i].UnionWith(_upstreamFailures[d]);
                    if (_ownFault[d])
                    {
                        _upstreamFailures[i].Add(d);
                    }
                }
                _runs[i] = _upstreamFailures[i].Count == 0;
                _ownFault[i] = _runs[i] && OwnFails(s);
                if (s.Kind != KindJob)
                {
                    _elemRuns[i] = new int[s.Len];
                    _elemStart[i] = new long[s.Len];
                    _elemEnd[i] = new long[s.Len];
                }
                if (HasChild(i))
                {
                    _runs[_n + i] = _runs[i];
                    _ownFault[_n + i] = _runs[i] && s.ChildFails;
                }
            }
        }

        private static bool OwnFails(Spec s) => s.Fails && (s.Kind == KindJob || s.FailAt < s.Len);

        private bool HasChild(int i) => _specs[i].Kind == KindJob && _specs[i].Child;

        /// <summary>The dependency handles of job i as listed: -1 is a default handle, repeats stay.</summary>
        private IEnumerable<int> RawDeps(int i) => _specs[i].Deps.Select(d => d < 0 || i == 0 ? -1 : d % i);

        /// <summary>The child's dependencies: a subset of its parent's (published before the parent was scheduled).</summary>
        private int[] ChildDeps(int parent) => _deps[parent].Where((_, k) => (_specs[parent].ChildMask & (1 << k)) != 0).ToArray();

        private long Next() => Interlocked.Increment(ref _seq);

        private void Fail(string message) => _failures.Enqueue(message);

        public void Run()
        {
            var rng = new Random(_seed);
            Task thread = TestUtil.RunOnThread(() => ScheduleOn(OnThread, new Random(_seed + 1)), "dag-scheduler");
            Task worker = TestUtil.AwaitAsync(Spindle.Run(() => ScheduleOn(OnWorker, new Random(_seed + 2))));
            ScheduleOn(OnMain, rng);
            if (!Task.WaitAll([thread, worker], TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
            {
                throw new TimeoutException("a scheduling thread hung");
            }
            if (rng.Next(2) == 0)
            {
                JobHandle.ScheduleBatchedJobs();
            }
            Task? watcher = _watch ? TestUtil.RunOnThread(Watch, "dag-watcher") : null;

            // Complete every handle, in a random order; a child's handle once its parent has completed (it is written
            // by the parent's Execute).
            foreach (int i in Enumerable.Range(0, _n).OrderBy(_ => rng.Next()))
            {
                CheckComplete(i, "final Complete");
                if (HasChild(i))
                {
                    CheckComplete(_n + i, "final Complete");
                }
            }
            // Again, in order, while jobs of the same types that reuse the succeeded jobs' nodes wait for a gated job:
            // a completed handle, stale or not, still reads completed and gives the same outcome, without waiting.
            var gate = new Gate();
            JobHandle gated = new GateJob(gate).Schedule();
            var recycler = new World([new Spec(KindJob, 0, 1, false, 0, [], 0, OnMain, 0, 0, 0, false, false, 0)], false, 0);
            var reusing = new JobHandle[3 * _n];
            try
            {
                for (int k = 0; k < _n; k++)
                {
                    reusing[3 * k] = new DagJob { World = recycler, Index = 0 }.Schedule(gated);
                    reusing[(3 * k) + 1] = new DagFor { World = recycler, Index = 0 }.Schedule(0, 1, gated);
                    reusing[(3 * k) + 2] = new DagBatch { World = recycler, Index = 0 }.ScheduleBatch(0, 1, gated);
                }
                for (int i = 0; i < 2 * _n; i++)
                {
                    if (!_handles[i].IsCompleted)
                    {
                        Fail($"job {i}: IsCompleted is false after Complete returned (its node may be reused by a pending job)");
                        continue;
                    }
                    CheckComplete(i, "second Complete");
                }
            }
            finally
            {
                gate.Dispose();
            }
            foreach (JobHandle h in reusing)
            {
                h.Complete();
            }
            gated.Complete();
            if (watcher is not null && !watcher.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
            {
                throw new TimeoutException("the watcher never saw every handle complete");
            }
            watcher?.GetAwaiter().GetResult();
            Task all = Task.WhenAll(_awaits);
            if (!all.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
            {
                Fail("an await on a completed handle never resumed");
            }
            all.GetAwaiter().GetResult(); // the awaits catch everything: this only surfaces bugs in the test
            CheckRecords();
            Assert.True(_failures.IsEmpty, string.Join(Environment.NewLine, _failures));
        }

        /// <summary>Schedules, in index order, the main jobs that belong to <paramref name="sched"/>, and runs their after-actions.</summary>
        private void ScheduleOn(int sched, Random rng)
        {
            for (int i = 0; i < _n; i++)
            {
                Spec s = _specs[i];
                if (s.Sched != sched)
                {
                    continue;
                }
                JobHandle dependsOn = Combine(RawDeps(i).ToArray(), s.Form, rng);
                JobHandle h = s.Kind switch
                {
                    KindJob => new DagJob { World = this, Index = i }.Schedule(dependsOn),
                    KindFor => new DagFor { World = this, Index = i }.Schedule(s.Len, s.Batch, dependsOn),
                    _ => new DagBatch { World = this, Index = i }.ScheduleBatch(s.Len, s.Batch, dependsOn),
                };
                _handles[i] = h;
                Volatile.Write(ref _published[i], 1);
                switch (s.After)
                {
                    case 1:
                        JobHandle.ScheduleBatchedJobs();
                        break;
                    case 2:
                        CheckComplete(s.Target % (i + 1), "Complete while scheduling");
                        break;
                    case 3:
                        int t = s.Target % (i + 1);
                        WaitPublished(t);
                        if (_handles[t].IsCompleted)
                        {
                            Observe(t, "IsCompleted while scheduling");
                        }
                        break;
                }
                if (s.Await != 0)
                {
                    _awaits.Enqueue(s.Await == 1 ? AwaitHandle(i, h) : AwaitAsTask(i, h));
                }
            }
        }

        /// <summary>
        /// Waits until job j's handle is published (its scheduler handles jobs in index order, so this ends). The
        /// scheduler on a worker helps while it waits, as Complete() there does: the job another scheduler is waiting
        /// for may sit in this worker's own queue, where a thread that is not a worker cannot reach it, and with one
        /// worker nothing else would run it.
        /// </summary>
        private void WaitPublished(int j)
        {
            if (Volatile.Read(ref _published[j]) != 0)
            {
                return;
            }
            if (!TestUtil.PollHelping(() => Volatile.Read(ref _published[j]) != 0, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
            {
                throw new TimeoutException($"job {j}'s handle was not published within {TestUtil.DefaultTimeoutSeconds} s");
            }
        }

        private JobHandle HandleOf(int j)
        {
            if (j < 0)
            {
                return default;
            }
            WaitPublished(j);
            return _handles[j];
        }

        /// <summary>Combines the listed handles (-1: default) in one of four shapes.</summary>
        private JobHandle Combine(int[] raw, int form, Random rng)
        {
            JobHandle[] hs = raw.Select(HandleOf).ToArray();
            if (hs.Length == 0)
            {
                return default;
            }
            if (hs.Length == 1)
            {
                return form == 3 ? JobHandle.CombineDependencies(hs) : hs[0];
            }
            switch (form)
            {
                case 0:
                    return JobHandle.CombineDependencies(hs);
                case 1:
                    JobHandle acc = hs[0];
                    for (int k = 1; k < hs.Length; k++)
                    {
                        acc = rng.Next(2) == 0 ? JobHandle.CombineDependencies(acc, hs[k]) : JobHandle.CombineDependencies(hs[k], acc);
                    }
                    return acc;
                case 2:
                    var groups = new List<JobHandle>();
                    for (int k = 0; k < hs.Length; k += 3)
                    {
                        JobHandle b = k + 1 < hs.Length ? hs[k + 1] : default;
                        JobHandle c = k + 2 < hs.Length ? hs[k + 2] : default;
                        groups.Add(JobHandle.CombineDependencies(hs[k], b, c));
                    }
                    return groups.Count == 1 ? groups[0] : JobHandle.CombineDependencies(groups.ToArray());
                default:
                    // A span of pairs, each pair a handle and the one after it (so most handles appear twice).
                    var pairs = new JobHandle[hs.Length];
                    for (int k = 0; k < hs.Length; k++)
                    {
                        pairs[k] = JobHandle.CombineDependencies(hs[k], hs[(k + 1) % hs.Length]);
                    }
                    return JobHandle.CombineDependencies(pairs);
            }
        }

        /// <summary>The exception Complete() may throw for job j: null when none, else the set it must come from.</summary>
        private HashSet<int>? ExpectedFaults(int j)
        {
            if (j >= _n)
            {
                return _ownFault[j] ? [j] : null;
            }
            if (_upstreamFailures[j].Count > 0)
            {
                return _upstreamFailures[j];
            }
            return _ownFault[j] ? [j] : null;
        }

        private void CheckOutcome(int j, Exception? thrown, string how)
        {
            HashSet<int>? expected = ExpectedFaults(j);
            if (expected is null)
            {
                if (thrown is not null)
                {
                    Fail($"job {j} ({how}): threw {thrown.GetType().Name} \"{thrown.Message}\", expected nothing");
                }
            }
            else if (thrown is null || !expected.Any(f => ReferenceEquals(_errors[f], thrown)))
            {
                Fail($"job {j} ({how}): threw {(thrown is null ? "nothing" : thrown.GetType().Name + " \"" + thrown.Message + "\"")}, expected the exception of one of jobs [{string.Join(",", expected)}]");
            }
        }

        private void CheckComplete(int j, string how)
        {
            if (j < _n)
            {
                WaitPublished(j);
            }
            Exception? thrown = JobTestUtil.CompleteCatching(_handles[j]);
            CheckOutcome(j, thrown, how);
            Observe(j, how);
        }

        /// <summary>
        /// Job j was seen completed: it and every job upstream of it that runs must have ended already (their ends come
        /// before this sequence number), and none may start later (checked at the end against the number).
        /// </summary>
        private void Observe(int j, string how)
        {
            long now = Next();
            IEnumerable<int> upstream = j < _n ? _closure[j] : [j];
            foreach (int d in upstream)
            {
                if (!_runs[d])
                {
                    continue;
                }
                if (d >= _n || _specs[d].Kind == KindJob)
                {
                    long end = Volatile.Read(ref _end[d]);
                    if (end == 0 || end > now)
                    {
                        Fail($"job {j} seen completed ({how}) at {now} before job {d} ended ({(end == 0 ? "not yet" : "at " + end)})");
                    }
                    continue;
                }
                for (int e = 0; e < _specs[d].Len; e++)
                {
                    long start = Volatile.Read(ref _elemStart[d][e]);
                    long end = Volatile.Read(ref _elemEnd[d][e]);
                    bool mustHaveRun = !_ownFault[d];
                    if ((mustHaveRun || start != 0) && (end == 0 || end > now))
                    {
                        Fail($"job {j} seen completed ({how}) at {now} before element {e} of job {d} ended (started {start}, ended {end})");
                        break;
                    }
                }
            }
            _observations.Enqueue((j, now, how));
        }

        private async Task AwaitHandle(int j, JobHandle handle)
        {
            Exception? thrown = null;
            try
            {
                await handle;
            }
            catch (Exception ex)
            {
                thrown = ex;
            }
            CheckOutcome(j, thrown, "await");
            Observe(j, "await");
        }

        private async Task AwaitAsTask(int j, JobHandle handle)
        {
            SpindleTask task = handle.AsSpindleTask();
            Exception? thrown = null;
            try
            {
                await TestUtil.WithTimeout(task);
            }
            catch (TimeoutException ex)
            {
                Fail($"job {j}: AsSpindleTask never completed ({ex.Message})");
                return;
            }
            catch (Exception ex)
            {
                thrown = ex;
            }
            CheckOutcome(j, thrown, "AsSpindleTask");
            Observe(j, "AsSpindleTask");
        }

        /// <summary>Polls every handle's IsCompleted (which flushes) until all read true, checking each when it first does.</summary>
        private void Watch()
        {
            var seen = new bool[_n];
            int left = _n;
            var bound = System.Diagnostics.Stopwatch.StartNew();
            while (left > 0)
            {
                for (int i = 0; i < _n; i++)
                {
                    if (!seen[i] && _handles[i].IsCompleted)
                    {
                        seen[i] = true;
                        left--;
                        Observe(i, "watcher's IsCompleted");
                    }
                }
                if (bound.Elapsed > TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds))
                {
                    Fail($"the watcher still saw {left} handles pending after {TestUtil.DefaultTimeoutSeconds} s");
                    return;
                }
                Thread.Yield();
            }
        }

        /// <summary>Runs exactly as often as the model says, in dependency order, never after an observation.</summary>
        private void CheckRecords()
        {
            for (int i = 0; i < 2 * _n; i++)
            {
                bool main = i < _n;
                if (!main && !HasChild(i - _n))
                {
                    continue;
                }
                if (!main || _specs[i].Kind == KindJob)
                {
                    int expected = _runs[i] ? 1 : 0;
                    if (_runCount[i] != expected)
                    {
                        Fail($"job {i} ran {_runCount[i]} times, expected {expected}");
                    }
                    continue;
                }
                Spec s = _specs[i];
                for (int e = 0; e < s.Len; e++)
                {
                    int runs = _elemRuns[i][e];
                    bool ok = !_runs[i] ? runs == 0
                        : !_ownFault[i] ? runs == 1
                        : e == s.FailAt ? runs == 1
                        : runs <= 1;
                    if (!ok)
                    {
                        Fail($"element {e} of job {i} ran {runs} times (job runs: {_runs[i]}, fails: {_ownFault[i]})");
                    }
                }
            }

            // Dependency order: every start comes after every end of every direct dependency (the child: its parent's).
            for (int i = 0; i < _n; i++)
            {
                if (!_runs[i])
                {
                    continue;
                }
                long firstStart = FirstStart(i);
                foreach (int d in _deps[i])
                {
                    long lastEnd = LastEnd(d);
                    if (firstStart != long.MaxValue && firstStart < lastEnd)
                    {
                        Fail($"job {i} started at {firstStart} before its dependency {d} ended at {lastEnd}");
                    }
                }
                if (HasChild(i))
                {
                    foreach (int d in ChildDeps(i))
                    {
                        if (_runs[_n + i] && _start[_n + i] < LastEnd(d))
                        {
                            Fail($"the child of job {i} started at {_start[_n + i]} before its dependency {d} ended at {LastEnd(d)}");
                        }
                    }
                }
            }

            // Nothing upstream of an observed completion started after it.
            foreach ((int j, long seq, string how) in _observations)
            {
                IEnumerable<int> upstream = j < _n ? _closure[j] : [j];
                foreach (int d in upstream)
                {
                    long lastStart = LastStart(d);
                    if (lastStart > seq)
                    {
                        Fail($"job {d} (upstream of {j}) started at {lastStart}, after job {j} was seen completed ({how}) at {seq}");
                    }
                }
            }
        }

        private bool IsJob(int i) => i >= _n || _specs[i].Kind == KindJob;

        private long FirstStart(int i)
        {
            if (IsJob(i))
            {
                return _start[i] == 0 ? long.MaxValue : _start[i];
            }
            long first = long.MaxValue;
            foreach (long s in _elemStart[i])
            {
                if (s != 0)
                {
                    first = Math.Min(first, s);
                }
            }
            return first;
        }

        private long LastStart(int i) => IsJob(i) ? _start[i] : _elemStart[i].DefaultIfEmpty().Max();

        private long LastEnd(int i) => IsJob(i) ? _end[i] : _elemEnd[i].DefaultIfEmpty().Max();

        public void ExecuteJob(int i)
        {
            Interlocked.Increment(ref _runCount[i]);
            Volatile.Write(ref _start[i], Next());
            if (i < _n && HasChild(i))
            {
                // Scheduled from inside this running job, on whatever thread runs it: a plain job depending on a
                // subset of this job's own dependencies.
                JobHandle[] deps = ChildDeps(i).Select(d => _handles[d]).ToArray();
                JobHandle dependsOn = deps.Length == 1 ? deps[0] : JobHandle.CombineDependencies(deps);
                _handles[_n + i] = new DagJob { World = this, Index = _n + i }.Schedule(dependsOn);
                if ((_specs[i].ChildMask & 1) != 0)
                {
                    JobHandle.ScheduleBatchedJobs();
                }
            }
            Volatile.Write(ref _end[i], Next());
            if (i >= _n ? _specs[i - _n].ChildFails : _specs[i].Fails)
            {
                throw _errors[i];
            }
        }

        public void ExecuteElement(int i, int e)
        {
            Interlocked.Increment(ref _elemRuns[i][e]);
            Volatile.Write(ref _elemStart[i][e], Next());
            Volatile.Write(ref _elemEnd[i][e], Next());
            if (_specs[i].Fails && e == _specs[i].FailAt)
            {
                throw _errors[i];
            }
        }

        public void ExecuteBatch(int i, int start, int count)
        {
            Spec s = _specs[i];
            if (start % s.Batch != 0 || count != Math.Min(s.Batch, s.Len - start) || count < 1)
            {
                Fail($"job {i}: batch ({start}, {count}) does not match length {s.Len} in batches of {s.Batch}");
                return;
            }
            for (int e = start; e < start + count; e++)
            {
                ExecuteElement(i, e);
            }
        }
    }

    private struct DagJob : IJob
    {
        public World World;
        public int Index;

        public readonly void Execute() => World.ExecuteJob(Index);
    }

    private struct DagFor : IJobParallelFor
    {
        public World World;
        public int Index;

        public readonly void Execute(int index) => World.ExecuteElement(Index, index);
    }

    private struct DagBatch : IJobParallelForBatch
    {
        public World World;
        public int Index;

        public readonly void Execute(int startIndex, int count) => World.ExecuteBatch(Index, startIndex, count);
    }
}
