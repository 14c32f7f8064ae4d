using System;
using System.Diagnostics;
using System.Threading;
using SpindleLib;

namespace SpindleLib.Samples.Sessions;

/// <summary>
/// A server's shape: a million sessions, each an async loop that waits for its next message or for its idle timeout,
/// whichever comes first (<c>await inbox.WaitAsync(idle)</c>, a signal's wait with a timeout; with <c>--whenany</c>,
/// the same race written as <c>WhenAny(inbox.WaitAsync(), Spindle.Delay(idle))</c>; with <c>--timer</c>, a loop that waits
/// on its inbox alone while its idle timeout is a <see cref="SpindleTimer"/> created once and pushed back by each message,
/// as <c>System.Threading.Timer.Change</c> or Netty's <c>IdleStateHandler</c> would be), while one producer thread sends
/// messages to random sessions at a fixed rate. The program prints, each second, the messages and idle timeouts
/// handled, the heap, the GC collections and the bytes allocated: after warm-up, nothing is allocated per message or
/// per timeout.
/// </summary>
/// <remarks>
/// Usage: <c>dotnet run -c Release --project samples/Spindle.Samples.Sessions [-- --sessions 1000000] [--seconds 10]
/// [--rate 500000] [--idle-ms 2000] [--whenany | --timer]</c>. A session's inbox is a <see cref="Signal"/> used as a wake-up, and the message
/// itself is the session's state (here a flag), read whichever way the session woke: so a message is handled once
/// even when it lands as the idle timeout fires (a set that lands as the race is decided is kept by the signal for the
/// next wait, never lost). With <c>--timer</c> the timer's callback counts the timeout and the loop is woken by messages
/// only, so a lost wake-up would be a lost message: no timeout comes round to take it.
/// </remarks>
public static class Program
{
    public static int Main(string[] args)
    {
        int sessions = 1_000_000, seconds = 10, rate = 500_000, idleMs = 2000;
        bool whenAny = false, timer = false;
        for (int i = 0; i < args.Length; i++)
        {
            switch (args[i])
            {
                case "--sessions" when i + 1 < args.Length: sessions = int.Parse(args[++i]); break;
                case "--seconds" when i + 1 < args.Length: seconds = int.Parse(args[++i]); break;
                case "--rate" when i + 1 < args.Length: rate = int.Parse(args[++i]); break;
                case "--idle-ms" when i + 1 < args.Length: idleMs = int.Parse(args[++i]); break;
                case "--whenany": whenAny = true; break;
                case "--timer": timer = true; break;
                default:
                    Console.Error.WriteLine("usage: [--sessions N] [--seconds N] [--rate MESSAGES_PER_SECOND] [--idle-ms N] [--whenany | --timer]");
                    return 2;
            }
        }
        if (sessions < 1 || seconds < 1 || rate < 0 || idleMs < 1)
        {
            Console.Error.WriteLine("--sessions, --seconds and --idle-ms must be at least 1, and --rate at least 0.");
            return 2;
        }
        if (whenAny && timer)
        {
            Console.Error.WriteLine("--whenany and --timer are two ways of waiting: give one of them.");
            return 2;
        }

        // Every waiting session holds a pooled timer node and its timeout (or, with --whenany, a pooled combinator); they
        // go back to Spindle's pools when the session wakes and are rented again by its next wait. Keep enough of them
        // that steady state never allocates. (With --timer, each session holds one pooled timer node for its whole life.)
        SpindlePool.MaxRetainedPerType = Math.Max(SpindlePool.MaxRetainedPerType, sessions);

        var idle = TimeSpan.FromMilliseconds(idleMs);
        var all = new Session[sessions];
        using var shutdown = new CancellationTokenSource();
        s_shutdown = shutdown.Token;
        long heapBefore = GC.GetTotalMemory(forceFullCollection: true);
        long start = Stopwatch.GetTimestamp();
        for (int i = 0; i < sessions; i++)
        {
            all[i] = new Session();
            (whenAny ? ServeWithWhenAny(all[i], idle, shutdown.Token)
                : timer ? ServeWithTimer(all[i], idle, shutdown.Token)
                : Serve(all[i], idle, shutdown.Token)).Forget();
        }
        double startMs = Stopwatch.GetElapsedTime(start).TotalMilliseconds;
        long heapAfter = GC.GetTotalMemory(forceFullCollection: true);
        Console.WriteLine($"Spindle sessions: {sessions:N0} sessions, {rate:N0} messages/s, idle timeout {idleMs} ms, for {seconds} s, " +
                          (whenAny ? "each waiting on WhenAny(inbox.WaitAsync(), Spindle.Delay(idle))"
                              : timer ? "each waiting on inbox.WaitAsync(), its idle timeout a SpindleTimer that each message pushes back (Change)"
                              : "each waiting on inbox.WaitAsync(idle)"));
        Console.WriteLine($"started the {sessions:N0} sessions in {startMs:F0} ms; {(heapAfter - heapBefore) / (double)sessions:F0} B of heap per waiting session");
        Console.WriteLine("  time    messages/s   timeouts/s   heap MB   gen0  gen1  gen2   allocated/s   cpu %");

        bool stop = false;
        long sent = 0;
        var producer = new Thread(() => sent = Produce(all, rate, () => Volatile.Read(ref stop))) { IsBackground = true, Name = "producer" };
        producer.Start();

        var process = Process.GetCurrentProcess();
        long lastMessages = 0, lastTimeouts = 0, lastAllocated = GC.GetTotalAllocatedBytes();
        int g0 = GC.CollectionCount(0), g1 = GC.CollectionCount(1), g2 = GC.CollectionCount(2);
        TimeSpan lastCpu = process.TotalProcessorTime;
        long last = Stopwatch.GetTimestamp();
        for (int s = 1; s <= seconds; s++)
        {
            Thread.Sleep(1000);
            long now = Stopwatch.GetTimestamp();
            double elapsed = (now - last) / (double)Stopwatch.Frequency;
            (long messages, long timeouts) = Totals(all);
            long allocated = GC.GetTotalAllocatedBytes();
            process.Refresh();
            TimeSpan cpu = process.TotalProcessorTime;
            Console.WriteLine($"{s,5}s  {(messages - lastMessages) / elapsed,12:N0} {(timeouts - lastTimeouts) / elapsed,12:N0} {GC.GetTotalMemory(false) / 1048576.0,9:F0} " +
                              $"{GC.CollectionCount(0) - g0,6}{GC.CollectionCount(1) - g1,6}{GC.CollectionCount(2) - g2,6} {(allocated - lastAllocated) / elapsed,13:N0} " +
                              $"{(cpu - lastCpu).TotalSeconds / elapsed / Environment.ProcessorCount * 100,7:F1}");
            lastMessages = messages;
            lastTimeouts = timeouts;
            lastAllocated = allocated;
            g0 = GC.CollectionCount(0);
            g1 = GC.CollectionCount(1);
            g2 = GC.CollectionCount(2);
            lastCpu = cpu;
            last = now;
        }
        Volatile.Write(ref stop, true);
        producer.Join();

        // Every message sent is handled once: wait for the sessions to take the last ones (a session that misses a
        // wake-up still takes its message at its idle timeout, so allow for one).
        var wait = Stopwatch.StartNew();
        long handled;
        while ((handled = Totals(all).Messages) < Volatile.Read(ref sent) && wait.Elapsed < idle + TimeSpan.FromSeconds(5))
        {
            Thread.Sleep(10);
        }
        Console.WriteLine($"total: {Volatile.Read(ref sent):N0} messages sent, {handled:N0} handled, in {wait.ElapsedMilliseconds} ms after the producer stopped");
        bool exact = handled == Volatile.Read(ref sent);
        if (!exact)
        {
            Console.Error.WriteLine("messages were lost or handled twice");
        }

        // Shut down: each session ends at its next wake-up (its idle timeout at the latest; with --timer, the timer's
        // callback wakes it).
        shutdown.Cancel();
        wait.Restart();
        while (Volatile.Read(ref s_live) > 0 && wait.Elapsed < idle + TimeSpan.FromSeconds(5))
        {
            Thread.Sleep(10);
        }
        Console.WriteLine($"shut down: {Volatile.Read(ref s_live):N0} sessions still running {wait.ElapsedMilliseconds} ms after the shutdown");
        GC.KeepAlive(all);
        return exact && Volatile.Read(ref s_live) == 0 ? 0 : 1;
    }

    /// <summary>One session: its inbox (a wake-up), the message waiting for it (0 or 1), and what it handled.</summary>
    private sealed class Session
    {
        public readonly Signal Inbox = new();
        public int Pending;
        public long Messages;
        public long Timeouts;
    }

    private static int s_live;
    private static CancellationToken s_shutdown;

    private static async SpindleTask Serve(Session session, TimeSpan idle, CancellationToken shutdown)
    {
        Interlocked.Increment(ref s_live);
        while (!shutdown.IsCancellationRequested)
        {
            bool woken = await session.Inbox.WaitAsync(idle); // false: the idle timeout passed first
            Handle(session, timedOut: !woken);
        }
        Interlocked.Decrement(ref s_live);
    }

    /// <summary>As <see cref="Serve"/>, with the race written as a WhenAny of the wait and a delay (a pooled combinator per wait).</summary>
    private static async SpindleTask ServeWithWhenAny(Session session, TimeSpan idle, CancellationToken shutdown)
    {
        Interlocked.Increment(ref s_live);
        while (!shutdown.IsCancellationRequested)
        {
            int woke = await SpindleTask.WhenAny(session.Inbox.WaitAsync(), Spindle.Delay(idle));
            Handle(session, timedOut: woke == 1);
        }
        Interlocked.Decrement(ref s_live);
    }

    /// <summary>
    /// As <see cref="Serve"/>, with the idle timeout a <see cref="SpindleTimer"/> of the session's own, created once and
    /// pushed back by each message (one CAS), while the loop waits on its inbox alone; the timer's callback
    /// (<see cref="OnIdle"/>) counts the timeout. The timer is periodic, so a session idle for longer times out again each
    /// idle period, as the loops above do.
    /// </summary>
    private static async SpindleTask ServeWithTimer(Session session, TimeSpan idle, CancellationToken shutdown)
    {
        Interlocked.Increment(ref s_live);
        // A local: the method's box keeps it, so the other modes' sessions do not carry a timer field they never use.
        SpindleTimer idleTimer = TimerWheel.Default.CreateTimer(OnIdle, session, idle, idle);
        while (!shutdown.IsCancellationRequested)
        {
            await session.Inbox.WaitAsync();
            if (Handle(session, timedOut: false))
            {
                idleTimer.Change(idle, idle); // a callback the wheel has already taken still runs, as with Timer
            }
        }
        idleTimer.Dispose();
        Interlocked.Decrement(ref s_live);
    }

    /// <summary>A session's idle timeout (with <c>--timer</c>), on Spindle's workers: counts it, or, once shutting down, wakes the loop to end.</summary>
    private static void OnIdle(object? state)
    {
        var session = (Session)state!;
        if (s_shutdown.IsCancellationRequested)
        {
            session.Inbox.Set();
            return;
        }
        Interlocked.Increment(ref session.Timeouts); // idle: a real server would ping, or close
    }

    /// <summary>Handles what woke the session: its message, if one is waiting (whichever way it woke), or its idle timeout. True for a message.</summary>
    private static bool Handle(Session session, bool timedOut)
    {
        if (Interlocked.Exchange(ref session.Pending, 0) == 1)
        {
            Volatile.Write(ref session.Messages, session.Messages + 1); // only this loop writes it; the reporter reads
            return true;
        }
        if (timedOut)
        {
            Volatile.Write(ref session.Timeouts, session.Timeouts + 1); // idle: a real server would ping, or close
        }
        return false;
    }

    /// <summary>
    /// Sends <paramref name="rate"/> messages a second to random sessions, in a batch each millisecond; returns how many
    /// were sent as messages of their own (one sent to a session that has one waiting joins it).
    /// </summary>
    private static long Produce(Session[] all, int rate, Func<bool> stopped)
    {
        uint random = 2463534242;
        long attempts = 0, sent = 0;
        long start = Stopwatch.GetTimestamp();
        while (!stopped())
        {
            long due = (long)(Stopwatch.GetElapsedTime(start).TotalSeconds * rate);
            while (attempts < due)
            {
                random ^= random << 13;
                random ^= random >> 17;
                random ^= random << 5;
                Session session = all[random % (uint)all.Length];
                attempts++;
                if (Interlocked.CompareExchange(ref session.Pending, 1, 0) == 0)
                {
                    sent++;
                    session.Inbox.Set(); // wakes the session (on this thread), or is kept until its next wait
                }
                // Otherwise the session has a message waiting already: this one joins it (not counted as sent).
            }
            Thread.Sleep(1);
        }
        return sent;
    }

    private static (long Messages, long Timeouts) Totals(Session[] all)
    {
        long messages = 0, timeouts = 0;
        foreach (Session session in all)
        {
            messages += Volatile.Read(ref session.Messages);
            timeouts += Volatile.Read(ref session.Timeouts);
        }
        return (messages, timeouts);
    }
}
