using System;
using System.Diagnostics;
using System.Threading;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Bench.Scenarios;

/// <summary>
/// The server's and the MMO zone's timers (docs/decisions.md section 49, user21): N pending timers, each pushed back K
/// times (an idle timeout reset by each message, a buff refreshed), then disposed. <c>Task</c>: a
/// <see cref="System.Threading.Timer"/> and its <c>Change</c>; <c>Spindle</c>: a <see cref="SpindleTimer"/> on a
/// wheel of the system clock of its own (so that its pending count, which the rounds wait on, counts its timers alone:
/// the delays <c>SpindleDelay</c> cancelled on <see cref="TimerWheel.Default"/> leave it later) and its <c>Change</c>; <c>SpindleDelay</c>: what Spindle offered before, a loop
/// awaiting <c>Spindle.Delay</c> with a <see cref="CancellationTokenSource"/> cancelled and replaced for each re-arm.
/// Beside them, <c>SpindleTimeProvider</c> (the wheel's <see cref="ITimer"/>, tp55), a case of sources on either
/// provider (<c>cts</c>), and the same calls made by many threads at once (<c>threads</c>, <c>cts-threads</c>,
/// <c>cts-one-creator</c>, tp56: see <see cref="Threaded"/>).
/// </summary>
public sealed class TimerChangeScenario : Scenario
{
    private static readonly TimeSpan Far = TimeSpan.FromSeconds(600); // never reached in a round: every Change is a push back
    private static readonly TimeSpan Infinite = Timeout.InfiniteTimeSpan;
    private static readonly TimerCallback s_timerCallback = static _ => { };
    private static readonly Action<object?> s_spindleCallback = static _ => { };

    public override string Id => "timer-change";

    public override string Title => "N pending timers, each pushed back K times (Change), then disposed";

    public override string Seed => "decisions 49 (user21)";

    public override string Baseline => "Task";

    public override string Notes =>
        "Case n=...: " +
        "One thread. Per round: create N timers due in 600 s, K passes over them each pushing every timer back by 1 ms more " +
        "(Change, timed: ns_per_op and bytes_per_op are per Change, all threads), then dispose them (create and dispose timed together: " +
        "ns_per_create_dispose, bytes_per_create_dispose, per timer; ns_per_create_dispose_settled also waits, after the creates and after " +
        "the disposes, until the wheel has linked and let go of them all, since Spindle's timer thread does that part after the calls return; " +
        "that wait, outside the other timings, also keeps it out of the Change passes and the next system's round). Task: System.Threading.Timer, Change, Dispose. Spindle: " +
        "CreateTimer on a TimerWheel of the system clock of its own (its pending count holds its timers alone), SpindleTimer.Change, Dispose. SpindleDelay: an async SpindleTask loop per timer awaiting " +
        "Spindle.Delay(600 s, source.Token).SuppressCancellationThrow(); a re-arm swaps in a new CancellationTokenSource and cancels the old " +
        "one (the loop wakes inline and waits again), Dispose cancels without a replacement. The systems' rounds alternate (side by side). " +
        "bytes_per_timer: GC heap (after a full collection, pools trimmed) with the N timers pending, less before, over N, measured once " +
        "per system outside the timed rounds; both readings wait until every wheel of the case has let go of the timers disposed before " +
        "(a wheel unlinks them after Dispose returns, so the previous system's would otherwise be counted in \"before\" and, let go of " +
        "meanwhile, missing from \"after\"), and \"after\" also until the system's wheel counts the N timers pending. Quick mode warms each system up with three rounds, not the harness's steady-state wait. " +
        "SpindleTimeProvider: the same operations through ITimer, from TimerWheel.AsTimeProvider() of a wheel of its own (its CreateTimer, Change, Dispose). " +
        "Case cts,n=...: the server's idle timeout written against TimeProvider: new CancellationTokenSource(600 s, provider), CancelAfter " +
        "for each push back (ns_per_op), Dispose; Task: TimeProvider.System (the source's own timer), SpindleTimeProvider: the wheel's provider. " +
        "Cases threads,n=... (Task, Spindle, SpindleTimeProvider) and cts-threads,n=... (Task, SpindleTimeProvider): the same calls made by " +
        $"{Threads} threads at once (one per logical core, at least two), each on its own share of the N timers, all on one wheel per system " +
        "(the system clock's timer queues for Task); each phase starts the threads together and ends when the last one ends, so ns_per_op and " +
        "ns_per_create_dispose are wall-clock time over all the threads' calls (the inverse of their throughput), not one call's latency. " +
        "Case cts-one-creator,n=...: as cts-threads, but one thread creates and disposes all the sources, and all the threads push them back " +
        "(a server whose timeouts are started where connections are accepted and pushed back where messages are handled): TimeProvider.System's " +
        "timers then share one processor's timer queue and its lock.";

    /// <summary>The threads of the many-thread cases: one per logical core, at least two.</summary>
    private static int Threads => Math.Max(2, Environment.ProcessorCount);

    public override void Run(BenchContext context)
    {
        int n = context.Pick(2_000, 100_000, 1_000_000);
        int k = context.Pick(2, 2, 4);
        string caseName = $"n={(n >= 1000 ? n / 1000 + "k" : n.ToString())},k={k}";
        using (var spindleWheel = new TimerWheel(TimeProvider.System))
        using (var providerWheel = new TimerWheel(TimeProvider.System))
        {
            RunCase(context, caseName, n, k, [new TaskTimers(n), new SpindleTimers(n, spindleWheel), new DelayTimers(n), new ProviderTimers(n, providerWheel)]);
        }
        using (var wheel = new TimerWheel(TimeProvider.System))
        {
            RunCase(context, "cts," + caseName, n, k, [Sources.OnSystem(n), Sources.OnWheel(n, wheel)]);
        }
        // The same calls made by many threads at once, each on a share of the N timers (a server's connections spread
        // over its threads), all on one wheel per system.
        int threads = Threads;
        using (var spindleWheel = new TimerWheel(TimeProvider.System))
        using (var providerWheel = new TimerWheel(TimeProvider.System))
        using (var task = new Threaded(n, threads, static share => new TaskTimers(share)))
        using (var spindle = new Threaded(n, threads, share => new SpindleTimers(share, spindleWheel)))
        using (var provider = new Threaded(n, threads, share => new ProviderTimers(share, providerWheel)))
        {
            RunCase(context, "threads," + caseName, n, k, [task, spindle, provider]);
        }
        using (var wheel = new TimerWheel(TimeProvider.System))
        using (var system = new Threaded(n, threads, static share => Sources.OnSystem(share)))
        using (var provider = new Threaded(n, threads, share => Sources.OnWheel(share, wheel)))
        {
            RunCase(context, "cts-threads," + caseName, n, k, [system, provider]);
        }
        using (var wheel = new TimerWheel(TimeProvider.System))
        using (var system = new Threaded(n, threads, static share => Sources.OnSystem(share), oneCreator: true))
        using (var provider = new Threaded(n, threads, share => Sources.OnWheel(share, wheel), oneCreator: true))
        {
            RunCase(context, "cts-one-creator," + caseName, n, k, [system, provider]);
        }
    }

    private static void RunCase(BenchContext context, string caseName, int n, int k, ISystem[] systems)
    {
        var resting = new long[systems.Length]; // what each system's wheel holds before this case (see LiveBytesPerTimer)
        for (int s = 0; s < systems.Length; s++)
        {
            resting[s] = systems[s].Held();
        }
        foreach (ISystem system in systems)
        {
            context.Progress($"{caseName} › {system.Name}: warm-up");
            if (context.Size == BenchSize.Quick)
            {
                // Three rounds, so that the quick run of every scenario stays short: the harness's warm-up waits for two
                // rounds within 15% of each other, which SpindleDelay's noisy rounds on a shared machine took its 3 s limit
                // to give up on. A round makes 100,000 calls of each method measured, enough for tiering to promote them.
                for (int w = 0; w < 3; w++)
                {
                    Round(system, n, k);
                }
            }
            else
            {
                context.Warmup(() => Round(system, n, k));
            }
        }
        int rounds = context.Rounds;
        var change = new double[systems.Length][];
        var changeBytes = new double[systems.Length][];
        var life = new double[systems.Length][];
        var lifeBytes = new double[systems.Length][];
        var settled = new double[systems.Length][];
        for (int s = 0; s < systems.Length; s++)
        {
            change[s] = new double[rounds];
            changeBytes[s] = new double[rounds];
            life[s] = new double[rounds];
            lifeBytes[s] = new double[rounds];
            settled[s] = new double[rounds];
        }
        for (int r = 0; r < rounds; r++)
        {
            for (int j = 0; j < systems.Length; j++)
            {
                int s = (r + j) % systems.Length;
                context.Progress($"{caseName} › {systems[s].Name}: round {r + 1}/{rounds} (side by side)");
                BenchContext.Settle();
                RoundFigures f = Round(systems[s], n, k);
                change[s][r] = f.ChangeNanos / ((double)n * k);
                changeBytes[s][r] = f.ChangeBytes / ((double)n * k);
                life[s][r] = f.LifeNanos / n;
                lifeBytes[s][r] = f.LifeBytes / (double)n;
                settled[s][r] = f.SettledLifeNanos / n;
            }
        }
        for (int s = 0; s < systems.Length; s++)
        {
            string name = systems[s].Name;
            context.Add(caseName, name, "ns_per_op", change[s]);
            context.Add(caseName, name, "bytes_per_op", changeBytes[s]);
            context.Add(caseName, name, "ns_per_create_dispose", life[s]);
            context.Add(caseName, name, "bytes_per_create_dispose", lifeBytes[s]);
            context.Add(caseName, name, "ns_per_create_dispose_settled", settled[s]);
        }
        foreach (ISystem system in systems)
        {
            context.Progress($"{caseName} › {system.Name}: live heap");
            context.Add(caseName, system.Name, "bytes_per_timer", LiveBytesPerTimer(system, n, systems, resting));
        }
    }

    /// <summary>
    /// bytes_per_timer: the GC heap (after a full collection, pools trimmed) with the system's N timers pending, less
    /// before, over N. A wheel lets go of disposed timers after Dispose returns (its timer thread unlinks them), so a
    /// reading taken while some wheel of the case still held timers disposed earlier (the previous system's, or a round's)
    /// counted them in "before"; let go of during the measurement, past the pool's cap, they were garbage by "after",
    /// and the system measured came out short by up to the node's 96 B a timer (tp57: the wheel's ITimer read 64–160 B at
    /// n=2k and 97–160 at n=100k, in either case the system measured after another wheel's; each is a 64 B object and a
    /// 96 B node). So both readings wait until every system of the case holds no more than it did before the case, and
    /// "after" also until the system's own wheel counts the N timers as pending.
    /// </summary>
    private static double LiveBytesPerTimer(ISystem system, int n, ISystem[] systems, long[] resting)
    {
        WaitUntilLetGo(systems, resting);
        long baseline = system.Pending();
        SpindlePool.Trim();
        long before = Counters.Heap();
        system.Create();
        WaitForPending(system, baseline < 0 ? -1 : baseline + n);
        long after = Counters.Heap();
        system.Dispose();
        WaitUntilLetGo(systems, resting); // before the next system's reading, not inside it
        return Math.Max(0, after - before) / (double)n;
    }

    /// <summary>Spins until each system's wheel holds at most what it held before the case (<see cref="ISystem.Held"/>); at most 10 s.</summary>
    private static void WaitUntilLetGo(ISystem[] systems, long[] resting)
    {
        var clock = Stopwatch.StartNew();
        var spin = default(SpinWait);
        for (int s = 0; s < systems.Length; s++)
        {
            while (systems[s].Held() > resting[s])
            {
                if (clock.ElapsedMilliseconds > 10_000)
                {
                    throw new InvalidOperationException($"{systems[s].Name}: its wheel holds {systems[s].Held()} timers, not {resting[s]} as before the case, 10 s after they were disposed.");
                }
                spin.SpinOnce();
            }
        }
    }

    private readonly record struct RoundFigures(double ChangeNanos, long ChangeBytes, double LifeNanos, long LifeBytes, double SettledLifeNanos);

    private static RoundFigures Round(ISystem system, int n, int k)
    {
        long baseline = system.Pending();
        long a0 = GC.GetTotalAllocatedBytes(true);
        long t0 = Stopwatch.GetTimestamp();
        system.Create();
        long t1 = Stopwatch.GetTimestamp();
        WaitForPending(system, baseline < 0 ? -1 : baseline + n); // Spindle's timer thread links the new timers after CreateTimer returns
        long t1Settled = Stopwatch.GetTimestamp();
        long a1 = GC.GetTotalAllocatedBytes(true);
        long t1Change = Stopwatch.GetTimestamp();
        for (int pass = 1; pass <= k; pass++)
        {
            system.PushBack(Far + TimeSpan.FromMilliseconds(pass));
        }
        long t2 = Stopwatch.GetTimestamp();
        long a2 = GC.GetTotalAllocatedBytes(true);
        system.Dispose();
        long t3 = Stopwatch.GetTimestamp();
        WaitForPending(system, baseline); // and unlinks and recycles the disposed ones after Dispose returns
        long t3Settled = Stopwatch.GetTimestamp();
        long a3 = GC.GetTotalAllocatedBytes(true);
        double perTick = 1e9 / Stopwatch.Frequency;
        return new RoundFigures((t2 - t1Change) * perTick, a2 - a1, ((t1 - t0) + (t3 - t2)) * perTick, (a1 - a0) + (a3 - a2),
            ((t1Settled - t0) + (t3Settled - t2)) * perTick);
    }

    /// <summary>Spins until the system counts <paramref name="target"/> pending timers (Spindle's wheel has settled its change inbox); at most 10 s.</summary>
    private static void WaitForPending(ISystem system, long target)
    {
        if (target < 0 || system.Pending() < 0)
        {
            return;
        }
        var clock = Stopwatch.StartNew();
        var spin = default(SpinWait);
        while (system.Pending() != target)
        {
            if (clock.ElapsedMilliseconds > 10_000)
            {
                throw new InvalidOperationException($"{system.Name}: the wheel counts {system.Pending()} timers, not {target}, 10 s after the calls returned.");
            }
            spin.SpinOnce();
        }
    }

    private interface ISystem
    {
        string Name { get; }

        void Create();

        void PushBack(TimeSpan due);

        void Dispose();

        /// <summary>The timers the system's wheel holds, once it has settled; -1 where creates and disposes take effect inside the calls.</summary>
        long Pending();

        /// <summary>
        /// What the wheel this system's timers live on holds, whoever else uses it: <see cref="Pending"/>'s count, or
        /// <see cref="TimerWheel.Default"/>'s for <c>SpindleDelay</c>, whose cancelled delays leave it after the calls return; -1
        /// where a dispose takes effect inside the call.
        /// </summary>
        long Held() => Pending();
    }

    private sealed class TaskTimers(int n) : ISystem
    {
        private readonly Timer?[] _timers = new Timer?[n];

        public string Name => "Task";

        public long Pending() => -1;

        public void Create()
        {
            for (int i = 0; i < _timers.Length; i++)
            {
                _timers[i] = new Timer(s_timerCallback, null, Far, Infinite);
            }
        }

        public void PushBack(TimeSpan due)
        {
            foreach (Timer? timer in _timers)
            {
                timer!.Change(due, Infinite);
            }
        }

        public void Dispose()
        {
            for (int i = 0; i < _timers.Length; i++)
            {
                _timers[i]!.Dispose(); // a direct call, not DisposeAll's through IDisposable: the baseline's timing stays as it was
                _timers[i] = null;
            }
        }
    }

    /// <summary>
    /// <see cref="SpindleTimer"/>s on <paramref name="wheel"/>: a wheel of the system clock that holds this system's timers
    /// alone. Not <see cref="TimerWheel.Default"/>: delays another system cancelled there leave its pending count at their
    /// own pace, so a wait for an exact count there could miss it (the main command's run threw at 107,294 against 100,000).
    /// </summary>
    private sealed class SpindleTimers(int n, TimerWheel wheel) : ISystem
    {
        private readonly SpindleTimer[] _timers = new SpindleTimer[n];
        private readonly TimerWheel _wheel = wheel;

        public string Name => "Spindle";

        public long Pending() => _wheel.PendingCount;

        public void Create()
        {
            TimerWheel wheel = _wheel;
            for (int i = 0; i < _timers.Length; i++)
            {
                _timers[i] = wheel.CreateTimer(s_spindleCallback, null, Far);
            }
        }

        public void PushBack(TimeSpan due)
        {
            foreach (SpindleTimer timer in _timers)
            {
                timer.Change(due, Infinite);
            }
        }

        public void Dispose()
        {
            for (int i = 0; i < _timers.Length; i++)
            {
                _timers[i].Dispose();
                _timers[i] = default;
            }
        }
    }

    /// <summary>The same timers through <see cref="TimerWheel.AsTimeProvider"/>'s <see cref="ITimer"/> (tp55): what code written against <see cref="TimeProvider"/> gets.</summary>
    private sealed class ProviderTimers(int n, TimerWheel wheel) : ISystem
    {
        private readonly ITimer?[] _timers = new ITimer?[n];
        private readonly TimerWheel _wheel = wheel; // holding this system's timers alone, as SpindleTimers' (its pending count)

        public string Name => "SpindleTimeProvider";

        public long Pending() => _wheel.PendingCount;

        public void Create()
        {
            TimeProvider provider = _wheel.AsTimeProvider();
            for (int i = 0; i < _timers.Length; i++)
            {
                _timers[i] = provider.CreateTimer(s_timerCallback, null, Far, Infinite);
            }
        }

        public void PushBack(TimeSpan due)
        {
            foreach (ITimer? timer in _timers)
            {
                timer!.Change(due, Infinite);
            }
        }

        public void Dispose() => DisposeAll(_timers);
    }

    /// <summary>
    /// A server's idle timeouts as a <see cref="CancellationTokenSource"/> each, whose timer is the provider's:
    /// <see cref="TimeProvider.System"/> (<see cref="OnSystem"/>, the source's own timer queue timer) or a wheel's
    /// (<see cref="OnWheel"/>, <see cref="TimerWheel.AsTimeProvider"/> of a wheel holding this system's timers alone).
    /// </summary>
    private sealed class Sources : ISystem
    {
        private readonly CancellationTokenSource?[] _sources;
        private readonly TimeProvider _provider;
        private readonly TimerWheel? _wheel;

        private Sources(int n, string name, TimeProvider provider, TimerWheel? wheel)
        {
            _sources = new CancellationTokenSource?[n];
            Name = name;
            _provider = provider;
            _wheel = wheel;
        }

        public static Sources OnSystem(int n) => new(n, "Task", TimeProvider.System, null);

        public static Sources OnWheel(int n, TimerWheel wheel) => new(n, "SpindleTimeProvider", wheel.AsTimeProvider(), wheel);

        public string Name { get; }

        public long Pending() => _wheel is null ? -1 : _wheel.PendingCount;

        public void Create()
        {
            TimeProvider provider = _provider;
            for (int i = 0; i < _sources.Length; i++)
            {
                _sources[i] = new CancellationTokenSource(Far, provider);
            }
        }

        public void PushBack(TimeSpan due) => CancelAfterAll(_sources, due);

        public void Dispose() => DisposeAll(_sources);
    }

    private static void CancelAfterAll(CancellationTokenSource?[] sources, TimeSpan due)
    {
        foreach (CancellationTokenSource? source in sources)
        {
            source!.CancelAfter(due);
        }
    }

    /// <summary>Disposes each item and lets go of it (a Timer's, an ITimer's and a source's Dispose).</summary>
    private static void DisposeAll<T>(T?[] items)
        where T : class, IDisposable
    {
        for (int i = 0; i < items.Length; i++)
        {
            items[i]!.Dispose();
            items[i] = null;
        }
    }

    /// <summary>
    /// A system's N timers split among threads (the many-thread cases): each thread has a part of its own, a system over
    /// its share of the timers (all parts on one wheel, which counts them all), and each call runs every part's call at
    /// once, one per thread, returning when all have returned, so a round times the calls' wall-clock time from the
    /// first thread's start to the last one's end. The calling thread runs the first part; the others run on threads
    /// of this object's own, started once, which wait on a barrier between calls. With one creator, the calling thread
    /// alone creates and disposes the timers, and all the threads push them back: <see cref="TimeProvider.System"/>'s
    /// timers then share the timer queue of the processor that thread ran on, and its lock.
    /// </summary>
    private sealed class Threaded : ISystem, IDisposable
    {
        private enum Phase
        {
            Create,
            PushBack,
            Dispose,
            Exit,
        }

        private readonly ISystem[] _parts;
        private readonly Thread[] _threads;
        private readonly Barrier _barrier;
        private readonly bool _oneCreator;
        private Phase _phase;
        private TimeSpan _due;
        private Exception? _failure;

        /// <param name="n">The timers in all.</param>
        /// <param name="threads">The threads, the calling one included.</param>
        /// <param name="part">A part over the number of timers it is given (n / threads, or one more).</param>
        /// <param name="oneCreator">True: the calling thread alone creates and disposes every part's timers (one after another), and only the push backs are made by all the threads.</param>
        public Threaded(int n, int threads, Func<int, ISystem> part, bool oneCreator = false)
        {
            _oneCreator = oneCreator;
            _parts = new ISystem[threads];
            for (int t = 0; t < threads; t++)
            {
                _parts[t] = part(n / threads + (t < n % threads ? 1 : 0));
            }
            _barrier = new Barrier(threads);
            _threads = new Thread[threads - 1];
            for (int t = 1; t < threads; t++)
            {
                ISystem mine = _parts[t];
                _threads[t - 1] = new Thread(() => Serve(mine)) { IsBackground = true, Name = "timer-change part " + t };
                _threads[t - 1].Start();
            }
        }

        public string Name => _parts[0].Name;

        public long Pending() => _parts[0].Pending(); // the parts' wheel: one for all

        public long Held() => _parts[0].Held();

        public void Create() => RunAll(Phase.Create);

        public void PushBack(TimeSpan due)
        {
            _due = due; // published to the other threads by the barrier
            RunAll(Phase.PushBack);
        }

        public void Dispose() => RunAll(Phase.Dispose);

        void IDisposable.Dispose()
        {
            _phase = Phase.Exit;
            _barrier.SignalAndWait();
            foreach (Thread thread in _threads)
            {
                thread.Join();
            }
            _barrier.Dispose();
        }

        /// <summary>Runs <paramref name="phase"/> on every part: on all the threads at once, or, for a create or dispose with one creator, on the calling thread, part after part.</summary>
        private void RunAll(Phase phase)
        {
            _phase = phase;
            _failure = null;
            if (_oneCreator && phase != Phase.PushBack)
            {
                foreach (ISystem part in _parts)
                {
                    Run(part);
                }
            }
            else
            {
                _barrier.SignalAndWait(); // start together
                Run(_parts[0]);
                _barrier.SignalAndWait(); // all ended
            }
            if (_failure is { } failure)
            {
                throw new InvalidOperationException($"{Name}: a thread's {phase} failed.", failure);
            }
        }

        private void Serve(ISystem part)
        {
            while (true)
            {
                _barrier.SignalAndWait();
                if (_phase == Phase.Exit)
                {
                    return;
                }
                Run(part);
                _barrier.SignalAndWait();
            }
        }

        private void Run(ISystem part)
        {
            try
            {
                switch (_phase)
                {
                    case Phase.Create:
                        part.Create();
                        break;
                    case Phase.PushBack:
                        part.PushBack(_due);
                        break;
                    default:
                        part.Dispose();
                        break;
                }
            }
            catch (Exception ex)
            {
                Interlocked.CompareExchange(ref _failure, ex, null);
            }
        }
    }

    /// <summary>The user21 pattern: a timer is a loop awaiting a delay, moved by cancelling its source and giving it a new one.</summary>
    private sealed class DelayTimers(int n) : ISystem
    {
        private readonly Entry?[] _entries = new Entry?[n];

        public string Name => "SpindleDelay";

        public long Pending() => -1;

        public long Held() => TimerWheel.Default.PendingCount;

        private sealed class Entry
        {
            public CancellationTokenSource? Source = new();
            public TimeSpan Due = Far;
            public int Fired;
        }

        private static async SpindleTask Loop(Entry entry)
        {
            while (entry.Source is { } source)
            {
                if (!await Spindle.Delay(entry.Due, source.Token).SuppressCancellationThrow())
                {
                    entry.Fired++;
                    return;
                }
            }
        }

        public void Create()
        {
            for (int i = 0; i < _entries.Length; i++)
            {
                var entry = new Entry();
                _entries[i] = entry;
                Loop(entry).Forget();
            }
        }

        public void PushBack(TimeSpan due)
        {
            foreach (Entry? entry in _entries)
            {
                CancellationTokenSource old = entry!.Source!;
                entry.Due = due;
                entry.Source = new CancellationTokenSource();
                old.Cancel(); // the loop wakes here, inline, and waits again on the new source
            }
        }

        public void Dispose()
        {
            for (int i = 0; i < _entries.Length; i++)
            {
                Entry entry = _entries[i]!;
                CancellationTokenSource old = entry.Source!;
                entry.Source = null;
                old.Cancel();
                _entries[i] = null;
            }
        }
    }
}
