using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>How a combinator's slot holds its current input.</summary>
internal enum InputKind : byte
{
    /// <summary>A Spindle source and its token.</summary>
    Spindle,

    /// <summary>A BCL task.</summary>
    Task,

    /// <summary>A <see cref="ValueTask"/> in the slot, or a <see cref="ValueTask{TResult}"/> in the slot's cell.</summary>
    ValueTask,

    /// <summary>Nothing left to read: a result held inline (a Spindle task with no source), or a producer's synchronous exception.</summary>
    Read,
}

/// <summary>
/// What every combinator shares: one pooled slot per input (the state each input's continuation carries, kept across
/// uses), registration on every kind of input, the cells that keep typed inputs' results, and the reference count that
/// decides when the combinator may return to its pool. See <see cref="Combinator{TResult}"/> for the protocol.
/// </summary>
[StackTraceHidden]
internal abstract class CombinatorCore
{
#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): runs on the registering thread right after a Spindle input's slot is published and
    /// before it is registered, standing in for a preemption there, so that a test can decide the race on another thread
    /// at that moment. A Release build has no such call.
    /// </summary>
    internal static Action<int>? TestHookAfterSlotPublished;

    /// <summary>
    /// Tests only (a Debug build): runs when an input's completion reaches its slot, before the slot reads it: the window in
    /// which the input has completed and the combinator has not read it yet, for a misused read of it elsewhere.
    /// </summary>
    internal static Action<int>? TestHookBeforeInputRead;

    /// <summary>
    /// Tests only (a Debug build): runs just before a WhenAny of producers claims its winner, with the combinator and
    /// whether the claimant is its token's cancellation (else a producer that finished), standing in for a preemption
    /// there, so that a test can line the two claims up.
    /// </summary>
    internal static Action<CombinatorCore, bool>? TestHookBeforeWinnerClaim;
#endif

    private Slot[] _slots = Array.Empty<Slot>();
    private bool _hasValues;
    protected int _references;
    protected int _count;

    /// <summary>
    /// What a use was set up to do, seven flags in one byte (<see cref="Setup"/>). Invariant: only the thread that holds the
    /// combinator alone writes it (its renter, before any input or callback can see it, and <c>RecycleNow</c>); other
    /// threads only read it, so a flag's write, a read-modify-write of the byte, never loses another's. The flags that a
    /// deciding thread writes during the race stay bytes of their own (<see cref="_hasValues"/>,
    /// <see cref="_decidedEarly"/>, <see cref="_timedOut"/>). Seven bools of their own made every <c>Combinator&lt;T&gt;</c>
    /// 8 B bigger (176 B for an int result; 168 B now): these four bytes fill the hole before <see cref="_core"/>.
    /// </summary>
    private Setup _setup;

    /// <summary>A WhenAll's token or timeout completed the core (its outcome is no input's failure). Written by the deciding thread.</summary>
    private protected bool _decidedEarly;

    /// <summary>The timeout decided a use whose timeout is a result; written before the publication, by the deciding thread.</summary>
    private protected bool _timedOut;

    [Flags]
    private protected enum Setup : byte
    {
        None = 0,
        LetsGoOfLosers = 1,
        IsAny = 2,
        Aggregate = 4,
        StartsProducers = 8,
        Timed = 16,
        CountsInputs = 32,
        TimeoutIsResult = 64,
    }

    private protected bool Has(Setup flag) => (_setup & flag) != 0;

    /// <summary>Sets or clears <paramref name="flag"/>: only by the thread that holds the combinator alone (see <see cref="_setup"/>).</summary>
    private protected void Set(Setup flag, bool on) => _setup = on ? _setup | flag : _setup & ~flag;

    /// <summary>
    /// Set for a WhenAny that lets go of its losers once its race is decided, and for a WhenAll whose token or timeout may
    /// decide it before its inputs finish (see <see cref="DetachInputs"/>): a Spindle input registered after the decision
    /// is let go of by its registering thread (<see cref="LetGoAfterDecision"/>).
    /// </summary>
    protected bool LetsGoOfLosers
    {
        get => Has(Setup.LetsGoOfLosers);
        set => Set(Setup.LetsGoOfLosers, value);
    }

    /// <summary>A WhenAny (a race), not a WhenAll.</summary>
    protected bool IsAny
    {
        get => Has(Setup.IsAny);
        set => Set(Setup.IsAny, value);
    }

    /// <summary>The combined task's completion core (see <see cref="Combinator{TResult}"/>).</summary>
    protected SourceCore<VoidResult> _core;

    /// <summary>WhenAny: the index of the input that won (-1 until the race is decided), written by the decider before it publishes.</summary>
    protected int _winner;

    /// <summary>
    /// A WhenAny whose winner failed: what that failure was read from (see <see cref="Slot.ErrorOrigin"/>, which holds it
    /// in the winner's slot), or null.
    /// </summary>
    protected object? WinnerFaultOrigin => (uint)_winner < (uint)_count ? Volatile.Read(ref _slots[_winner].ErrorOrigin) : null;

    protected Slot[] Slots => _slots;

    /// <summary>Prepares for <paramref name="count"/> inputs: one reference per input, plus the consumer's.</summary>
    protected void Prepare(int count)
    {
        _references = count + 1;
        _count = count;
        if (_slots.Length < count)
        {
            var slots = new Slot[Math.Max(count, _slots.Length * 2)];
            Array.Copy(_slots, slots, _slots.Length);
            for (int i = _slots.Length; i < slots.Length; i++)
            {
                slots[i] = new Slot(this, i);
            }
            _slots = slots;
        }
    }

    /// <summary>Registers input <paramref name="index"/>, a Spindle task (one with no source is already complete).</summary>
    public void Add(int index, SpindleTask task)
    {
        Slot slot = Begin(index);
        if (task._source is { } source)
        {
            AddSource(slot, source, task._token);
        }
        else
        {
            slot.Kind = InputKind.Read;
            slot.Complete();
        }
    }

    /// <summary>Registers input <paramref name="index"/>, a typed Spindle task whose result is kept.</summary>
    public void Add<T>(int index, SpindleTask<T> task)
    {
        Slot slot = Begin(index);
        Cell<T> cell = UseCell<T>(slot);
        if (task._source is { } source)
        {
            AddSource(slot, source, task._token);
        }
        else
        {
            cell.Value = task._result;
            slot.Kind = InputKind.Read;
            slot.Complete();
        }
    }

    /// <summary>Registers input <paramref name="index"/>, a BCL task.</summary>
    public void Add(int index, Task task) => AddTask(Begin(index), task);

    /// <summary>Registers input <paramref name="index"/>, a typed BCL task whose result is kept.</summary>
    public void Add<T>(int index, Task<T> task)
    {
        Slot slot = Begin(index);
        UseCell<T>(slot);
        AddTask(slot, task);
    }

    /// <summary>Registers input <paramref name="index"/>, a ValueTask: it is read exactly once, by its slot.</summary>
    public void Add(int index, ValueTask task)
    {
        Slot slot = Begin(index);
        slot.Kind = InputKind.ValueTask;
        slot.ValueTask = task;
        CompleteOrRegister(slot, task.IsCompleted, task.ConfigureAwait(false).GetAwaiter());
    }

    /// <summary>Registers input <paramref name="index"/>, a typed ValueTask whose result is kept; read exactly once.</summary>
    public void Add<T>(int index, ValueTask<T> task)
    {
        Slot slot = Begin(index);
        UseCell<T>(slot).Pending = task;
        slot.Kind = InputKind.ValueTask;
        CompleteOrRegister(slot, task.IsCompleted, task.ConfigureAwait(false).GetAwaiter());
    }

    /// <summary>Input <paramref name="index"/> failed before it was a task (a producer threw): it completes now, faulted.</summary>
    public void AddFailed(int index, Exception exception)
    {
        Slot slot = Begin(index);
        slot.Kind = InputKind.Read;
        slot.Error = ExceptionDispatchInfo.Capture(exception);
        slot.Complete();
    }

    private Slot Begin(int index)
    {
        Slot slot = _slots[index];
        slot.Error = null;
        slot.ErrorOrigin = null;
        slot.TakenSet = null;
        slot.DropCell();
        slot.ReadState = Slot.Unread;
        return slot;
    }

    private Cell<T> UseCell<T>(Slot slot)
    {
        _hasValues = true;
        return slot.UseCell<T>();
    }

    private void AddSource(Slot slot, ISpindleSource source, short token)
    {
        slot.Kind = InputKind.Spindle;
        slot.Token = token;
        // Source publishes the slot's use: a release store after every other field of it (Begin's, Kind, Token), read
        // with an acquire by a decider that may meet the slot while it is being registered (LetGo). Written last, so that
        // such a decider never pairs this use's source with the previous use's token or read state.
        Volatile.Write(ref slot.Source, source);
#if DEBUG
        TestHookAfterSlotPublished?.Invoke(slot.Index);
#endif
        if (LetsGoOfLosers && source is Signal signal)
        {
            // A set this combinator may give back (GiveBackSet): registered as a waiter that reads as a reader, so that a
            // misused read of the wait elsewhere leaves its mark for the give-back.
            signal.OnCompletedAsReader(slot, token);
        }
        else if (DirectWaiter.IsUsersSource(source))
        {
            slot.RegisterOnUsersSource(source, token); // a second run is refused, not counted as another input
        }
        else
        {
            source.OnCompleted(DirectWaiter.s_moveNext, slot, token); // the slot is its own continuation
        }
        // A WhenAny decided while its inputs are being registered (another input won on another thread, or the token was
        // already cancelled) may have missed this slot: it is let go of here. While the race is open, its decider will see
        // this registration (see DetachInputs). The registration is a full fence before the read below: the CAS that
        // registers, or, when the input had completed already, the inline callback (which settles the slot itself) or
        // the scheduler's interlocked enqueue that dispatches it past the nesting bound.
        if (LetsGoOfLosers && _core.IsCompletingOrCompleted)
        {
            LetGoAfterDecision(slot);
        }
    }

    /// <summary>
    /// The race was decided while the inputs were being registered. The decider may still be letting go of the slots it
    /// saw: wait for it to publish (the consumer cannot act before this WhenAny returns), then let go of this slot as it
    /// would have.
    /// </summary>
    private void LetGoAfterDecision(Slot slot)
    {
        SpinWait spin = default;
        while (!_core.IsCompleted)
        {
            spin.SpinOnce();
        }
        if (slot.Index != _winner && LetGo(slot))
        {
            OnInputLetGo();
        }
    }

    /// <summary>
    /// A registering thread let go of its input after the decision (<see cref="LetGoAfterDecision"/>): that input will
    /// never call back, so its reference is dropped here (and, for a WhenAll that counts its inputs, its count).
    /// </summary>
    protected virtual void OnInputLetGo() => Release();

    private static void AddTask(Slot slot, Task task)
    {
        slot.Kind = InputKind.Task;
        slot.Task = task;
        CompleteOrRegister(slot, task.IsCompleted, task.ConfigureAwait(false).GetAwaiter());
    }

    /// <summary>
    /// A BCL task or ValueTask that has finished is read now: an awaiter registered on it would be queued to the thread
    /// pool (an allocation, and a delay). Otherwise the slot's cached Action is registered: a BCL task stores it as its
    /// continuation, and a ValueTask over an IValueTaskSource passes it to one OnCompleted as the state, so nothing is
    /// allocated. (A struct awaiter, so the interface call is constrained: no boxing.)
    /// </summary>
    private static void CompleteOrRegister<TAwaiter>(Slot slot, bool completed, TAwaiter awaiter)
        where TAwaiter : struct, ICriticalNotifyCompletion
    {
        if (completed)
        {
            slot.Complete();
        }
        else
        {
            awaiter.UnsafeOnCompleted(slot.TaskContinuation);
        }
    }

    /// <summary>The result that input <paramref name="index"/> produced (its slot holds a <typeparamref name="T"/> cell).</summary>
    public T Value<T>(int index) => Unsafe.As<Cell<T>>(_slots[index].Typed!).Value;

    /// <summary>Every input's result, in input order, in a new array.</summary>
    public T[] ValuesToArray<T>()
    {
        var values = new T[_count];
        CopyValuesTo<T>(values);
        return values;
    }

    /// <summary>Every input's result, in input order, written to <paramref name="destination"/>.</summary>
    public void CopyValuesTo<T>(Span<T> destination)
    {
        for (int i = 0; i < _count; i++)
        {
            destination[i] = Value<T>(i);
        }
    }

    /// <summary>Drops the results kept in the cells, so that nothing leaks from one use to the next.</summary>
    protected void ClearValues()
    {
        if (!_hasValues)
        {
            return;
        }
        _hasValues = false;
        for (int i = 0; i < _count; i++)
        {
            _slots[i].Typed?.Clear();
            _slots[i].DropCell();
        }
    }

    /// <summary>An input finished: read it (exactly once) and account for it.</summary>
    protected abstract void OnInputCompleted(Slot slot);

    /// <summary>Called when the last reference is dropped: clear and return to the pool.</summary>
    protected abstract void Recycle();

    protected void Release()
    {
        if (Interlocked.Decrement(ref _references) == 0)
        {
            Recycle();
        }
    }

    /// <summary>Drops <paramref name="count"/> references with one interlocked operation (none for zero); the last recycles.</summary>
    protected void Release(int count)
    {
        if (count > 0 && Interlocked.Add(ref _references, -count) == 0)
        {
            Recycle();
        }
    }

    /// <summary>
    /// Drops <paramref name="count"/> references (none for zero) that the caller knows are not the last: another holder's
    /// keeps the object (the consumer's, which it drops only in its read, after the publication; or an input's still to
    /// be settled). One interlocked operation, and never a recycle.
    /// </summary>
    public void ReleaseKept(int count)
    {
        if (count > 0)
        {
            int left = Interlocked.Add(ref _references, -count);
            Debug.Assert(left > 0, "another reference still keeps the object");
        }
    }

    /// <summary>
    /// Drops a reference that the caller knows is the last one but for its own when the count reads 1: nobody else holds
    /// one, and a count never goes up, so no interlocked operation is needed to recycle (the other holders' decrements
    /// were full fences, and this read sees them).
    /// </summary>
    protected void ReleaseLast()
    {
        if (Volatile.Read(ref _references) == 1)
        {
            Recycle();
        }
        else
        {
            Release();
        }
    }

    /// <summary>
    /// The race is decided: lets go of every input other than <paramref name="except"/> (see <see cref="LetGo"/>), so
    /// that, when the combined task completes, no losing promise or signal wait is still attached or unread: their owners
    /// may reset or wait on them again at once. Returns how many were detached: the caller drops their references.
    /// </summary>
    /// <remarks>
    /// Registration and decision meet as a Dekker pair, each side a full fence between its write and its read: a
    /// registrant CASes the input's core and then reads the combinator's core (<see cref="LetGoAfterDecision"/>); the
    /// decider CASes the combinator's core and then reads each input's (a registration in progress is waited for). So
    /// every slot is let go of by one of them, or by both, and the detach CAS and the read claim make that once.
    /// </remarks>
    protected int DetachInputs(int except)
    {
        int detached = 0;
        Slot[] slots = _slots;
        for (int i = 0; i < _count; i++)
        {
            if (i != except && LetGo(slots[i]))
            {
                detached++;
            }
        }
        return detached;
    }

    /// <summary>
    /// The decider's side of a decided race, under its claim on the core and before it publishes: lets go of every input
    /// but <paramref name="winner"/> (-1 when the token decided) and drops the references of the detached ones, and the
    /// winner's own. The sets that losing signal waits had taken are given back (<see cref="GiveBackSet"/>).
    /// </summary>
    protected void LetGoOfLosers(int winner)
    {
        int detached = DetachInputs(winner);
        int others = winner < 0 ? _count : _count - 1;
        if (detached == others)
        {
            // Every other input is detached and will never call back, and the consumer acts only once the core has
            // completed (after this returns): nothing else can touch the count now, and only the consumer's reference is
            // left.
            Debug.Assert(_references == _count + 1, "no input has dropped its reference yet");
            _references = 1;
            return;
        }
        ReleaseKept(detached + (winner < 0 ? 0 : 1)); // the consumer's reference keeps the object until it reads
    }

    /// <summary>
    /// Lets go of one losing input. A Spindle input whose source allows it (<see cref="IDetachableSource"/>) is detached,
    /// and then never calls back; returns true, and the caller drops its reference. One whose source has completed (or
    /// is completing), and is safe to read twice (a promise, a signal's wait), is read now (<see cref="ReadLoserNow"/>).
    /// Any other input stays registered: its callback reads it when it finishes. A set that a signal's wait read now had
    /// taken is given back.
    /// </summary>
    protected bool LetGo(Slot slot)
    {
        // Source first, with an acquire (see AddSource), then the rest of the use. It is cleared by the slot's own read:
        // null means the input was read already, or is being read by its own callback, or is not published yet (its
        // registrant will let go of it).
        if (Volatile.Read(ref slot.Source) is not IDetachableSource source || slot.Kind != InputKind.Spindle)
        {
            // A callback that claimed the read clears Source before it reports the failure it read: wait for that read
            // to end, as ReadLoserNow does when it loses the claim, so that a losing fault is reported before the combined
            // task completes whichever side read it.
            AwaitClaimedRead(slot);
            return false;
        }
        switch (source.TryDetach(slot))
        {
            case DetachOutcome.Detached:
                slot.Source = null;
                return true;
            case DetachOutcome.Completed:
                ReadLoserNow(slot);
                return false;
            default:
                return false;
        }
    }

    /// <summary>
    /// A losing input completed while the race was being decided: its slot's callback runs when that completion reaches
    /// it, which may be much later (a source that dispatches its continuations, or a deep stack). It is read now instead,
    /// before the combined task completes, so that the consumer finds it settled: a losing promise can be reset, a signal
    /// waited on again, and a late read can neither misread the next use nor drop its registrations. The read is claimed
    /// against the slot's own callback (<see cref="Slot.ReadState"/>); whichever loses the claim waits for the other's
    /// read, which is a few instructions away.
    /// </summary>
    private static void ReadLoserNow(Slot slot)
    {
        if (!slot.TryClaimRead())
        {
            AwaitClaimedRead(slot); // the slot's own callback reads it, and gives back a set it took
            return;
        }
        SpinWait spin = default;
        if (Volatile.Read(ref slot.Source) is not { } source)
        {
            // The slot's registration failed (the caller's error) and its source was withdrawn after this thread met it:
            // there is nothing of this slot's to read.
            slot.EndRead();
            return;
        }
        while (!HasSettled(source, slot.Token))
        {
            spin.SpinOnce(); // its completer is between its claim and its publication: a few stores
        }
        ReadAndReportLoser(slot);
        slot.EndRead();
    }

    /// <summary>
    /// Reads a losing slot's input (the caller holds its read claim) and reports its failure. A promise's task is not
    /// consumed by the read, and the caller may still forget it: its fault is reported once per completion
    /// (<see cref="FaultReport.Claim"/>), whichever report comes first. A losing signal wait's set never reached the
    /// caller: given back before the read ends, so before a decider waiting for this read publishes.
    /// </summary>
    private static void ReadAndReportLoser(Slot slot)
    {
        ExceptionDispatchInfo? error = slot.ReadInput(out Signal? taken, out object? origin);
        short token = slot.Token; // a ValueTask's, if its read found its origin
        GiveBackSet(taken, token);
        if (error is not null && slot.Owner.IsTheWinnersFailure(origin, token))
        {
            return; // the same completion as the winner's, whose failure the combined task carries
        }
        ReportLoserOnce(error, origin, token);
    }

    /// <summary>
    /// Gives back the set that this combinator's read of signal wait <paramref name="token"/> took (<paramref name="signal"/>;
    /// null if none), which never reached its caller: a losing wait of a WhenAny, or a wait a WhenAll read before its token
    /// or timeout decided. So the signal's next wait takes it, as it takes a set that lands after the wait was let go of: a
    /// set is delivered to a caller or kept, never lost (the guarantee a SemaphoreSlim.WaitAsync with a timeout gives its
    /// releases). The one rule of every give-back (<see cref="Signal.GiveBackSet"/>, as a WhenAny settled at the call
    /// gives back): only if the combinator's read is the only one that had it. Its slot registered as a waiter that reads
    /// as a reader (<see cref="Signal.OnCompletedAsReader"/>) or found the wait completed, so that read marked the wait; a
    /// set that reached anybody else too (the caller read the wait before handing it over, or while the combinator held
    /// it, or an awaiter elsewhere was resumed by it) is theirs, and not given back. Given back, the wait's token is stale:
    /// a later read of it is the await-once error. Runs nothing, so it is called under the claim, before publication,
    /// while the wait is still the combinator's (a wait started meanwhile is a second waiter: see the Signal's remarks).
    /// </summary>
    protected static void GiveBackSet(Signal? signal, short token) => signal?.GiveBackSet(token, readByCaller: true);

    /// <summary>
    /// True for a losing WhenAny input that is the winner's own completion, passed twice (a promise's task, a preserved
    /// task, a BCL task): its failure is the winner's, which the combined task carries (see <see cref="Slot.ErrorOrigin"/>).
    /// Failure path only. A loser that lost to a winner still between its claim on the core and its write of
    /// <see cref="_winner"/> (it is reading its own finished input: a few instructions, never a wait) waits for that write.
    /// </summary>
    private bool IsTheWinnersFailure(object? origin, short token)
    {
        if (!IsAny || !FaultReport.IsRereadable(origin))
        {
            return false;
        }
        int winner;
        SpinWait spin = default;
        while ((winner = Volatile.Read(ref _winner)) == -1)
        {
            spin.SpinOnce();
        }
        return (uint)winner < (uint)_count && ReferenceEquals(Volatile.Read(ref _slots[winner].ErrorOrigin), origin)
            && (origin is Task || _slots[winner].Token == token);
    }

    /// <summary>
    /// Reports a failure read from <paramref name="origin"/> (a Spindle source's use <paramref name="token"/>, or a BCL
    /// task) that nobody will rethrow, once per completion: a fault only if its report is claimed
    /// (<see cref="FaultReport.Claim"/>; an input a read does not consume may be reported by another reader, another
    /// copy, or a Forget(), as well). A cancellation claims nothing.
    /// </summary>
    internal static void ReportLoserOnce(ExceptionDispatchInfo? error, object? origin, short token)
    {
        if (error is not null && (error.SourceException is OperationCanceledException || FaultReport.Claim(origin, token)))
        {
            ReportLoser(error);
        }
    }

    /// <summary>
    /// Waits while the slot's own callback holds the claim on its read (<see cref="Slot.Reading"/>): the read, and the
    /// report of a failure it read, are a few instructions and the handlers away. Returns at once if nobody claimed it,
    /// or its read has ended.
    /// </summary>
    private static void AwaitClaimedRead(Slot slot)
    {
        SpinWait spin = default;
        while (Volatile.Read(ref slot.ReadState) == Slot.Reading)
        {
            spin.SpinOnce();
        }
    }

    private static bool HasSettled(ISpindleSource source, short token)
    {
        try
        {
            return source.GetStatus(token) != SpindleTaskStatus.Pending;
        }
        catch (InvalidOperationException)
        {
            return true; // a stale token: the use is over (the read below reports the misuse)
        }
    }

    /// <summary>
    /// The slot's own callback, for an input that lost: reads it unless <see cref="ReadLoserNow"/> claimed it first (only
    /// Spindle inputs can be claimed so), reports its failure, and drops its reference.
    /// </summary>
    protected void ReadLoser(Slot slot)
    {
        if (slot.TryClaimRead())
        {
            ReadAndReportLoser(slot); // gives back a set the wait took, before the read ends
            slot.EndRead();
        }
        Release();
    }

    /// <summary>A losing input's failure is not rethrown, but it is never lost either.</summary>
    internal static void ReportLoser(ExceptionDispatchInfo? error)
    {
        if (error is null)
        {
            return;
        }
        if (BclRead.AllOf(error) is { } several)
        {
            foreach (Exception e in several)
            {
                ReportLoser(e); // a BCL task that faulted with several: every one is reported
            }
            return;
        }
        ReportLoser(error.SourceException);
    }

    /// <summary>A losing input's failure is not rethrown, but it is never lost either; cancellation is not a failure.</summary>
    internal static void ReportLoser(Exception error)
    {
        if (error is not OperationCanceledException)
        {
            UnobservedExceptions.Report(error);
        }
    }

    /// <summary>
    /// One input's registration, kept with the combinator: a Spindle input's direct waiter (a source stores the slot
    /// itself and resumes it with one virtual call), or the state a BCL input's continuation carries.
    /// </summary>
    [StackTraceHidden]
    internal sealed class Slot : DirectWaiter
    {
        public readonly CombinatorCore Owner;
        public readonly int Index;
        private Action? _taskContinuation;

        /// <summary>
        /// The continuation a BCL input (a Task or ValueTask) is given: made on the slot's first such input and kept with
        /// the pooled slot, so a combinator over Spindle tasks alone never makes one (a waiting WhenAny of a signal and a
        /// delay is two slots, and a delegate each would be 128 B more per waiting WhenAny).
        /// </summary>
        public Action TaskContinuation => _taskContinuation ??= Complete;
        public InputKind Kind;
        public ISpindleSource? Source;
        public short Token;
        public Task? Task;
        public ValueTask ValueTask;

        /// <summary>
        /// What this use's input is read from, before its read clears it: its Spindle source, or its BCL task; null for a
        /// ValueTask (its read finds it: <see cref="ReadInput(out object?)"/>), or an input that failed before it was a
        /// task. A failure's origin, for the claim of its report.
        /// </summary>
        public object? Origin => Kind switch
        {
            InputKind.Spindle => Volatile.Read(ref Source),
            InputKind.Task => Task,
            _ => null,
        };

        /// <summary>
        /// A ValueTask input's read found that its failure came from <paramref name="origin"/>'s use
        /// <paramref name="token"/> (<see cref="ValueTaskOrigin"/>: the Spindle source behind it, when a read does not
        /// consume that source; null: nothing): the token is kept in <see cref="Token"/> for the claim of its report, and
        /// the origin is returned, for the read to hand to <see cref="ReadInput(out object?)"/>. (The origin is not kept on
        /// the slot: it lives only during that one read, and a field would cost every slot 8 B, 16 B per waiting WhenAny
        /// of two.)
        /// </summary>
        public object? NoteReadOrigin(object? origin, short token)
        {
            if (origin is not null)
            {
                Token = token;
            }
            return origin;
        }

        /// <summary>This use's cell when the input's result is kept (a typed input); null for an untyped input.</summary>
        public InputCell? Typed => _typed ? _cellCache : null;

        // True while this use keeps its result in _cellCache (UseCell), until DropCell. A flag, not a second reference:
        // the cell a use keeps is always the slot's cached one, and a reference cost every slot 8 B (16 B per waiting
        // WhenAny of two). Written where the reference was, so it is read under the same orderings.
        private bool _typed;

        /// <summary>This use keeps no result (a new use, or the values were dropped); the cell stays cached for the next.</summary>
        public void DropCell() => _typed = false;

        /// <summary>The input's failure; for <see cref="InputKind.Read"/>, set before the slot completes.</summary>
        public ExceptionDispatchInfo? Error;

        /// <summary>
        /// A WhenAll's: what <see cref="Error"/> was read from, when a read does not consume it (a Spindle source that is
        /// an <see cref="IRereadableSource"/>, or a BCL task), so that a report of that stored failure (by a token or
        /// timeout that decided, or by the reader of a combination whose registration failed) claims the completion's one
        /// report (<see cref="FaultReport.Claim"/>): its task may be forgotten, passed twice, or read by another
        /// combinator, as well. Set with <see cref="Error"/> on the failure path only (<see cref="KeepFailure"/>), and
        /// cleared with it.
        /// <para>A WhenAny's, in its winner's slot only (no other slot of a WhenAny sets it): what the winner's failure was
        /// read from, when one completion of it can be read more than once (as above), written by the decider before
        /// <see cref="_winner"/> (a release), on the failure path only. A loser that is a second copy of that very
        /// completion (the caller passed the task twice) is not reported: the winner's failure is the combined task's
        /// (<see cref="IsTheWinnersFailure"/>). Cleared when the combinator is recycled. Kept here, not in a field of the
        /// combinator's, so that a WhenAny is not 8 B bigger for it.</para>
        /// </summary>
        public object? ErrorOrigin;

        /// <summary>
        /// A WhenAll keeps its input's outcome, read from <paramref name="origin"/> (the slot's Spindle source or BCL task
        /// before the read cleared it, or null): <see cref="Error"/>, and on the failure path <see cref="ErrorOrigin"/>.
        /// </summary>
        public void KeepFailure(ExceptionDispatchInfo? error, object? origin)
        {
            if (error is not null && FaultReport.IsRereadable(origin))
            {
                ErrorOrigin = origin;
            }
            Error = error;
        }

        /// <summary>
        /// A WhenAll with a token or a timeout: the signal whose set this slot's read took (its wait succeeded), until the
        /// combination's outcome says whether the set reached the caller (cleared) or not (given back: see
        /// <see cref="GiveBackSet"/>). Taken with an exchange, so it is given back once.
        /// </summary>
        public Signal? TakenSet;

        /// <summary>
        /// For a WhenAny's losing Spindle input: <see cref="Unread"/>, then <see cref="Reading"/> for whichever of the
        /// slot's callback and a decider that reads it early (<see cref="ReadLoserNow"/>) claims it with a CAS, then
        /// <see cref="Read"/>. Invariant: the input is read exactly once, by the claimant; the other waits for Read.
        /// </summary>
        public int ReadState;

        public const int Unread = 0;
        public const int Reading = 1;
        public const int Read = 2;

        /// <summary>
        /// Claims the input's one read (true), against a decider that may read it early; false if the other side has
        /// claimed it. Only a Spindle input can be read early, so any other kind is always the caller's to read.
        /// </summary>
        public bool TryClaimRead() => Kind != InputKind.Spindle || Interlocked.CompareExchange(ref ReadState, Reading, Unread) == Unread;

        /// <summary>The claimed read is done: a side that lost the claim and waits for it may go on.</summary>
        public void EndRead() => Volatile.Write(ref ReadState, Read);

        private InputCell? _cellCache;

        public Slot(CombinatorCore owner, int index)
        {
            Owner = owner;
            Index = index;
        }

        public void Complete() => Owner.OnInputCompleted(this);

        private int _runOwed; // 1 while a user's source owes this slot its run (see DirectWaiter.ExchangeRunOwed)

        private protected override bool ExchangeRunOwed(bool owed) => Interlocked.Exchange(ref _runOwed, owed ? 1 : 0) == 1;

        /// <summary>A Spindle input completed.</summary>
        public override void MoveNext() => Owner.OnInputCompleted(this);

        public override void Execute() => Owner.OnInputCompleted(this);

        /// <summary>A cell for a <typeparamref name="T"/> result, kept across uses (a pooled combinator sees the same types each time).</summary>
        public Cell<T> UseCell<T>()
        {
            if (_cellCache is not Cell<T> cell)
            {
                cell = new Cell<T>();
                _cellCache = cell;
            }
            _typed = true;
            return cell;
        }

        /// <summary>
        /// As <see cref="ReadInput(out object?)"/>, for a read whose outcome may not reach the caller: <paramref name="takenSet"/> is
        /// the signal whose set the read took (the input was a signal's wait, and it succeeded with a set, not by its
        /// timeout), or null. Asked before the read, which lets go of the wait's state: the combinator holds the wait, so
        /// its outcome cannot change meanwhile.
        /// </summary>
        public ExceptionDispatchInfo? ReadInput(out Signal? takenSet, out object? origin)
        {
            Signal? signal = Kind == InputKind.Spindle ? Source as Signal : null;
            bool tookSet = signal is not null && signal.TookSet(Token);
            ExceptionDispatchInfo? error = ReadInput(out origin);
            takenSet = error is null && tookSet ? signal : null;
            return error;
        }

        /// <summary>
        /// As <see cref="ReadOnce"/>, with what a failure was read from (<see cref="Origin"/>, taken before the read clears
        /// it; for a ValueTask, what its read found, with its token in <see cref="Token"/>), for the claim of its report.
        /// </summary>
        public ExceptionDispatchInfo? ReadInput(out object? origin)
        {
            origin = Origin;
            ExceptionDispatchInfo? error = ReadOnce(out object? valueTaskOrigin);
            if (Kind == InputKind.ValueTask)
            {
                origin = error is null ? null : valueTaskOrigin;
            }
            return error;
        }

        /// <summary>
        /// Reads the input exactly once (so a pooled input goes back to its pool, and its exception is observed), keeping
        /// a typed input's result in its cell. Returns the input's failure, if any.
        /// </summary>
        private ExceptionDispatchInfo? ReadOnce(out object? valueTaskOrigin)
        {
            valueTaskOrigin = null;
            try
            {
                if (Kind == InputKind.Read)
                {
                    ExceptionDispatchInfo? failure = Error;
                    Error = null;
                    return failure;
                }
                if (Typed is { } cell)
                {
                    return cell.Read(this, out valueTaskOrigin);
                }
                if (Kind == InputKind.Spindle)
                {
                    return QuietRead.ReadOrThrow(Source!, Token);
                }
                if (Kind == InputKind.Task)
                {
                    Task!.GetAwaiter().GetResult();
                    return null;
                }
                ExceptionDispatchInfo? error = ValueTaskOrigin.Read(ValueTask, out object? origin, out short token);
                valueTaskOrigin = NoteReadOrigin(origin, token);
                return error;
            }
            catch (Exception ex)
            {
                return BclRead.Failure(Kind == InputKind.Task ? Task : null, ex);
            }
            finally
            {
                Source = null;
                Task = null;
                ValueTask = default;
            }
        }
    }

    /// <summary>Where a typed input's result is kept until the combined result is composed.</summary>
    internal abstract class InputCell
    {
        /// <summary>
        /// Reads the slot's typed input into the cell; returns a Spindle input's or a ValueTask's failure (a ValueTask's
        /// with its origin in <paramref name="valueTaskOrigin"/> and its token noted on the slot:
        /// <see cref="Slot.NoteReadOrigin"/>), and throws a BCL task's (its awaiter is the only way to read it as an await
        /// would) and misuse (the caller, the slot's one read, catches).
        /// </summary>
        public abstract ExceptionDispatchInfo? Read(Slot slot, out object? valueTaskOrigin);

        public abstract void Clear();
    }

    internal sealed class Cell<T> : InputCell
    {
        public T Value = default!;
        public ValueTask<T> Pending;

        public override ExceptionDispatchInfo? Read(Slot slot, out object? valueTaskOrigin)
        {
            valueTaskOrigin = null;
            switch (slot.Kind)
            {
                case InputKind.Spindle:
                    Value = QuietRead.ReadOrThrow(Unsafe.As<ISpindleSource<T>>(slot.Source!), slot.Token, out ExceptionDispatchInfo? error);
                    return error;
                case InputKind.Task:
                    Value = Unsafe.As<Task<T>>(slot.Task!).GetAwaiter().GetResult();
                    break;
                case InputKind.ValueTask:
                    ValueTask<T> pending = Pending;
                    Pending = default;
                    Value = ValueTaskOrigin.Read(pending, out ExceptionDispatchInfo? failure, out object? origin, out short token);
                    valueTaskOrigin = slot.NoteReadOrigin(origin, token);
                    return failure;
            }
            return null;
        }

        public override void Clear()
        {
            Value = default!;
            Pending = default;
        }
    }
}

/// <summary>
/// Collects the failures of a WhenAll's inputs, in input order: the one the BCL's <c>await Task.WhenAll</c> rethrows (the
/// first fault, else the first cancellation), or with <see cref="WhenAllOptions.AggregateExceptions"/> all of them.
/// </summary>
/// <remarks>
/// Failures are kept as the inputs' own <see cref="ExceptionDispatchInfo"/>s: the one rethrown is thrown with the trace its
/// input saved when it failed, whatever other awaits of the same exception object (a preserved task's, a promise's) have
/// done to the object's current trace since. An <see cref="AggregateException"/> holds the exception objects, as the BCL's
/// does.
/// </remarks>
internal struct WhenAllFailures
{
    private readonly bool _aggregate;
    private ExceptionDispatchInfo? _firstFault;
    private ExceptionDispatchInfo? _firstCancellation;
    private List<Exception>? _all;

    public WhenAllFailures(bool aggregate)
    {
        _aggregate = aggregate;
        _firstFault = null;
        _firstCancellation = null;
        _all = null;
    }

    public void Add(ExceptionDispatchInfo? error)
    {
        if (error is null)
        {
            return;
        }
        if (error.SourceException is OperationCanceledException)
        {
            _firstCancellation ??= error;
        }
        else
        {
            _firstFault ??= error;
        }
        if (_aggregate)
        {
            _all ??= new List<Exception>();
            if (BclRead.AllOf(error) is { } several)
            {
                _all.AddRange(several); // a BCL task that faulted with several (a Task.WhenAll's): each, as Task.WhenAll gives them
            }
            else
            {
                _all.Add(error.SourceException);
            }
        }
    }

    /// <summary>
    /// Null when every input succeeded. Otherwise, as the BCL's <c>Task.WhenAll</c>: faulted if any input faulted, with the
    /// lowest index's fault (cancellations before it passed over), or, when aggregating, an <see cref="AggregateException"/>
    /// of every failure (cancellations included) in input order; cancelled, with the first cancellation, if every failed
    /// input was cancelled.
    /// </summary>
    public readonly ExceptionDispatchInfo? Result
        => _firstFault is null ? _firstCancellation : _aggregate ? ExceptionDispatchInfo.Capture(new AggregateException(_all!)) : _firstFault;
}

/// <summary>
/// The one mechanism behind every WhenAll and WhenAny, for any number and kind of inputs: a pooled object that is the
/// source of the combined task and registers one pooled slot per input. Nothing is allocated per call in steady state,
/// whatever the count.
/// </summary>
/// <remarks>
/// <para><b>Lifetime.</b> The reference count (<c>_references</c>, in <see cref="CombinatorCore"/>) counts the inputs
/// still registered plus one for the consumer of the combined task. Each input's completion drops one; so does each input
/// the decided race detaches (below); reading the combined result drops the consumer's. The object returns to its pool
/// only at zero, so a WhenAny whose losers could not be detached (BCL tasks, ValueTasks, nested combinators) is
/// recycled only after the last of them finishes. One whose cancellation callback fired is not pooled again at all (see
/// <see cref="Recycle"/>).</para>
/// <para><b>Outcome.</b> For WhenAny, the first input to finish wins the CAS that begins the completion of the core
/// (<see cref="SourceCore{TResult}.TryBeginCompletion"/>): one atomic step decides the race and claims the core, and a
/// later input finds the core completing or completed and loses. The cancellation callback takes part in the same race,
/// so exactly one of them decides. (Over producers the race is a CAS on <see cref="CombinatorCore._winner"/> instead, which the
/// producers' start loop reads; see below.) For WhenAll, the reference count decides: the input whose completion brings
/// it down to 1 (only the consumer's reference left) is the last one, and completes the combined task (a WhenAll with a
/// token or a timeout, whose consumer may let go first, counts its inputs separately in <c>_inputsLeft</c>). If inputs failed,
/// it rethrows the fault of the lowest index (or, if no input faulted, its first cancellation), as the BCL's <c>await Task.WhenAll(...)</c> does (deterministic, whatever
/// order the inputs finished in), or an <see cref="AggregateException"/> of all of them when asked to. Every input that
/// finishes while registered is read exactly once, by its slot, so pooled inputs go back to their pools. A losing input's
/// fault is reported to <see cref="Spindle.UnobservedException"/>: it is not lost, and it is not rethrown.</para>
/// <para><b>Letting go of the losers (WhenAny).</b> The decider, while it holds the core and before it publishes, lets
/// go of every other input (<see cref="CombinatorCore.DetachInputs"/>), as <c>Task.WhenAny</c> removes its continuations
/// from its losers, so that the combined task's continuation may reset a losing promise or wait on a losing signal again
/// at once, and the combinator does not wait for them. An input whose source allows it (<see cref="IDetachableSource"/>:
/// promises, signal waits, delays, async methods) is detached with one CAS on its core, which decides against that input's own
/// completion: either the slot's callback runs (and drops its reference) or the source lets go of the slot (and the
/// decider drops its reference); the source then takes over what the slot would have done (a fault nobody reads is
/// reported once; an async method reads its own outcome). A promise or signal wait that completed while the race was
/// decided is read by the decider at once (claimed against its slot's callback, which may come much later), so no
/// late read can meet the next use. A slot registered after the decision (an input won on another thread during the
/// registration, or the token was already cancelled) is let go of by the registering thread, before the WhenAny
/// returns; registration and decision meet as a Dekker pair, so no slot is missed. When every other input was detached,
/// nothing but the consumer can touch the count any more, and the consumer acts only after the publication, so the
/// decider sets it with a plain store.</para>
/// <para><b>Letting go of the inputs (WhenAll).</b> A WhenAll whose token or timeout wins does the same for all its
/// inputs (<c>DecideAllEarly</c>): it claims the core, lets go of every input it can, and drops the count and the
/// reference of each one it detached before it publishes. Its slots' callbacks claim their read as a WhenAny loser's do,
/// since the decider may read an input that finished meanwhile. Whoever brings <c>_inputsLeft</c> to zero after such a
/// decision (the decider, a registrant letting go, or the last callback) reports the failures the inputs left in their
/// slots.</para>
/// <para><b>Result.</b> The completion core carries no value: typed inputs' results stay in their slots' cells, and the
/// combined result (an index, an array, a tuple, a copy into the caller's buffer) is composed by <c>_compose</c> when the
/// consumer reads it, while the consumer's reference still keeps the cells alive. So a cancelled or failed combination
/// never composes anything: a caller's buffer is written only for a success, when its result is read, never by a late
/// input after a cancelled wait.</para>
/// <para><b>Cancelling the losers.</b> For WhenAny over producers, the combinator owns the token it hands them. The
/// winner cancels it before completing the combined task (so losers stop before the consumer's continuation runs on this
/// thread), unless no other producer is still running: then the source can be reset and pooled. The producers' start
/// loop and the winner settle that with a Dekker pair: the loop increments <c>_unfinishedProducers</c> and then checks for
/// a winner; the winner CASes <see cref="CombinatorCore._winner"/> and then reads the count. Both are full fences, so a producer is
/// either not started or seen running (and cancelled).</para>
/// <para><b>Timeout (WhenAll).</b> A WhenAll with <see cref="WhenAllOptions.Timeout"/> owns one timer
/// (<see cref="TimeoutTimer"/>), armed in <see cref="Start"/>. The timer holds a reference of its own until its
/// continuation has run, or until whoever cancelled it drops it for it; so the last input is found by a separate count,
/// <see cref="_inputsLeft"/>. The timer's expiry competes for the core like the token's cancellation does, and the last
/// input and the token take the timer out of the wheel before they complete the combined task. A WhenAll of one rented
/// by <see cref="RentTimeoutAsResult"/> (<c>TryWithTimeout</c>) differs in one thing: a timeout that wins completes the
/// combined task successfully, with <see cref="TimedOut"/> set for its compose, and builds no exception.</para>
/// </remarks>
[StackTraceHidden]
internal sealed class Combinator<TResult> : CombinatorCore, ISpindleSource<TResult>, IPoolNode<Combinator<TResult>>, IQuietSource<TResult>, ILazyCanceledSource
{
    private Func<Combinator<TResult>, TResult>? _compose;
    private TResult _destination = default!;
    private CancellationTokenRegistration _registration;
    private CancellationToken _cancelToken;
    private int _cancelState; // CancelIdle, CancelRunning or CancelRecycleDeferred: see RunCancel
    private CancellationTokenSource? _producerSource;
    private int _unfinishedProducers;
    private TimeoutTimer _timer;
    private TimerWheel? _timers;
    private TimeSpan _timeout;
    private int _inputsLeft;
    private Exception? _abandonedWith; // see AbandonAfterFailedRegistration; kept until Recycle: never reported, the caller got it

    private bool Aggregate
    {
        get => Has(Setup.Aggregate);
        set => Set(Setup.Aggregate, value);
    }

    private bool StartsProducers
    {
        get => Has(Setup.StartsProducers);
        set => Set(Setup.StartsProducers, value);
    }

    private bool Timed
    {
        get => Has(Setup.Timed);
        set => Set(Setup.Timed, value);
    }

    private bool CountsInputs
    {
        get => Has(Setup.CountsInputs);
        set => Set(Setup.CountsInputs, value);
    }

    /// <summary>TryWithTimeout: the timeout succeeds with TimedOut set, instead of failing.</summary>
    private bool TimeoutIsResult
    {
        get => Has(Setup.TimeoutIsResult);
        set => Set(Setup.TimeoutIsResult, value);
    }

    private static readonly Action<object?> s_onTimeout = static o => ((Combinator<TResult>)o!).OnTimeout();
    // No callback outlives its use (see RunCancel), so the callback needs no check of which token fired: it is this use's.
#if NET
    private static readonly Action<object?, CancellationToken> s_cancel = static (o, _) => ((Combinator<TResult>)o!).RunCancel();
#else
    private static readonly Action<object?> s_cancel = static o => ((Combinator<TResult>)o!).RunCancel();
#endif
    private Combinator<TResult>? _poolNext;

    /// <summary>The value of <see cref="CombinatorCore._winner"/> once cancellation has decided a WhenAny.</summary>
    private const int CancelledRace = int.MaxValue;

    private const int CancelIdle = 0, CancelRunning = 1, CancelRecycleDeferred = 2;

    ref Combinator<TResult>? IPoolNode<Combinator<TResult>>.Next => ref _poolNext;

    public short Version => _core.Version;

    /// <summary>WhenAny: the index of the input that finished first (-1 until one has; <see cref="CancelledRace"/> if cancelled first).</summary>
    public int Winner => _winner;

    /// <summary>The caller's buffer, for a WhenAll that writes its results into one.</summary>
    public TResult Destination => _destination;

    /// <summary>
    /// Rents a WhenAll over <paramref name="count"/> inputs; <paramref name="compose"/> builds the result (null: none).
    /// A timeout in <paramref name="options"/> is armed by <see cref="Start"/>.
    /// </summary>
    /// <exception cref="ObjectDisposedException">The options ask for a timeout on a disposed wheel.</exception>
    public static Combinator<TResult> RentAll(int count, WhenAllOptions options, Func<Combinator<TResult>, TResult>? compose, TResult destination = default!)
    {
        TimeSpan? timeout = options.FiniteTimeout;
        TimerWheel? timers = timeout is null ? null : TimerWheel.ForTimeouts(options.Timers); // before renting: may throw
        Combinator<TResult> c = Rent(count, compose);
        c.IsAny = false;
        c.Aggregate = options.AggregateExceptions;
        c._destination = destination;
        c._timers = timers;
        c._timeout = timeout.GetValueOrDefault();
        return c;
    }

    /// <summary>
    /// Rents a WhenAll of one input whose timeout is an outcome, not a failure (<c>TryWithTimeout</c>): when the timeout
    /// wins, the combined task succeeds, with <see cref="TimedOut"/> set for <paramref name="compose"/>, instead of failing
    /// with a <see cref="TimeoutException"/>. Everything else is a timed WhenAll's (<see cref="RentAll"/>): the token, the
    /// input's own failure, a disposed wheel (canceled), letting go of the input.
    /// </summary>
    /// <exception cref="ObjectDisposedException">The options ask for a timeout on a disposed wheel.</exception>
    public static Combinator<TResult> RentTimeoutAsResult(WhenAllOptions options, Func<Combinator<TResult>, TResult> compose)
    {
        Combinator<TResult> c = RentAll(1, options, compose);
        c.TimeoutIsResult = true;
        return c;
    }

    /// <summary>
    /// The timeout decided this use (one rented by <see cref="RentTimeoutAsResult"/>): the input was let go of, and its
    /// result is not there to read. Read by the compose, after the publication.
    /// </summary>
    public bool TimedOut => _timedOut;

    /// <summary>Rents a WhenAny over <paramref name="count"/> inputs; <paramref name="compose"/> builds the result from the winner.</summary>
    public static Combinator<TResult> RentAny(int count, Func<Combinator<TResult>, TResult> compose)
    {
        Combinator<TResult> c = Rent(count, compose);
        c.IsAny = true;
        c.LetsGoOfLosers = true;
        return c;
    }

    private static Combinator<TResult> Rent(int count, Func<Combinator<TResult>, TResult>? compose)
    {
        Combinator<TResult> c = ObjectPool<Combinator<TResult>>.TryRent() ?? new Combinator<TResult>();
        c._winner = -1;
        c._compose = compose;
        c.Prepare(count);
        return c;
    }

    /// <summary>The winner's result if input <paramref name="index"/> won, else default (a WhenAny tuple's other elements).</summary>
    public T WinnerValue<T>(int index) => index == _winner ? Value<T>(index) : default!;

    /// <summary>
    /// Starts a use: returns its token and lets <paramref name="cancellationToken"/> cancel the combined task (not the
    /// inputs: the combinator lets go of those it can, and reads the rest when they finish). Called before the inputs
    /// are registered, so a token that is already cancelled cancels at once, and the inputs registered afterwards are let
    /// go of by their registrant. The registration is removed when the result is read or the object recycled.
    /// </summary>
    public short Start(CancellationToken cancellationToken)
    {
        short token = _core.Version;
        if (!IsAny && (_timers is not null || cancellationToken.CanBeCanceled))
        {
            // The combined task can complete before the last input (timed out or cancelled), and its consumer then drop
            // its reference early: so the last input is found by a count of its own, not by the reference count.
            CountsInputs = true;
            _inputsLeft = _count;
            // And if the token or the timeout wins, the wait lets go of the inputs, as a WhenAny lets go of its losers.
            LetsGoOfLosers = true;
        }
        // A token already cancelled decides at once (its callback runs in Register, below), before any timeout, as
        // Task.WaitAsync(timeout, token) checks the token first: so no timer is armed for it, and a zero timeout does
        // not fail the wait with a TimeoutException ahead of the cancellation.
        if (_timers is { } timers && !cancellationToken.IsCancellationRequested)
        {
            StartTimeout(timers);
        }
        if (cancellationToken.CanBeCanceled)
        {
            _cancelToken = cancellationToken;
            _registration = CancellationRegistrations.Register(cancellationToken, s_cancel, this);
        }
        return token;
    }

    /// <summary>
    /// Arms a WhenAll's timeout, before any input is registered (so nothing else touches the counts yet). The timer holds
    /// a reference of its own, so the inputs' countdown moves to <see cref="_inputsLeft"/>. A zero timeout needs no
    /// timer: the combined task fails at once, and the inputs are let go of as they are registered (see
    /// <see cref="CombinatorCore.LetGoAfterDecision"/>).
    /// </summary>
    private void StartTimeout(TimerWheel timers)
    {
        if (_timeout == TimeSpan.Zero)
        {
            _decidedEarly = true;
            if (TimeoutIsResult)
            {
                _timedOut = true; // nothing else can complete the core yet: no input is registered, no token registered
                _core.TrySetResult(default);
            }
            else
            {
                _core.TrySetException(TimerWheel.NewTimeoutException(_timeout));
            }
            return;
        }
        Timed = true;
        _references++;
        _timer.ArmAfter(timers, _timeout, s_onTimeout, this);
    }

    private void OnTimeout()
    {
        // The IsCompleted check only saves allocating an exception that would lose; the core's CAS still decides.
        if (_timer.OnFired(out Exception? stopped) && !_core.IsCompleted)
        {
            if (stopped is null && TimeoutIsResult)
            {
                DecideAllEarly(null, timedOut: true); // a result: no exception is built
            }
            else
            {
                // stopped: the wheel was disposed, and the wait completes as canceled, as the wheel's pending delays do.
                DecideAllEarly(ExceptionDispatchInfo.Capture(stopped ?? TimerWheel.NewTimeoutException(_timeout)));
            }
        }
        Release();
    }

    /// <summary>
    /// A WhenAll's token or timeout takes the race from its inputs with the core's CAS, and, before the combined task
    /// completes, lets go of every input it can, as a WhenAny's decider lets go of its losers (<see cref="CombinatorCore.DetachInputs"/>):
    /// so its continuation finds no promise or signal wait still attached or unread (it may reset or wait on them again at
    /// once), and a late read can never meet their next use. An input detached here never calls back: its count and its
    /// reference are dropped now. One that had finished meanwhile is read now (and its fault reported); the rest (BCL
    /// tasks, ValueTasks) are still read when they finish. The failure is captured before the claim; null stands for a
    /// cancellation by the token, stored lazily (its exception is built for a reader that throws it), unless
    /// <paramref name="timedOut"/>: a timeout that is a result (<see cref="RentTimeoutAsResult"/>) succeeds, with
    /// <see cref="TimedOut"/> set under the claim, so never by a timeout that lost.
    /// </summary>
    private void DecideAllEarly(ExceptionDispatchInfo? outcome, bool timedOut = false)
    {
        if (!_core.TryBeginCompletion(out object? waiter))
        {
            return; // the last input, or the other of token and timeout, decided first
        }
        _decidedEarly = true; // before the publication, which ReadAbandoned follows
        if (Timed)
        {
            CancelTimer();
        }
        // The sets that inputs read before this decision took: given back now, not when the last input is accounted for
        // (an input that cannot be let go of may never finish). A read that stores its set after this exchange sees the
        // core claimed and gives it back itself (see OnInputCompleted): a Dekker pair, both sides full fences.
        GiveBackStoredSets();
        int detached = DetachInputs(-1);
        if (detached > 0)
        {
            // The consumer's reference keeps the object until it reads, which it can only do after the publication below.
            ReleaseKept(detached);
            InputsLetGo(detached);
        }
        if (timedOut)
        {
            _timedOut = true;
            _core.EndCompletion(waiter, null);
        }
        else if (outcome is null)
        {
            _core.EndCompletionCanceledLazily(waiter);
        }
        else
        {
            _core.EndCompletion(waiter, outcome);
        }
    }

    /// <summary>
    /// For a WhenAll that counts its inputs: an input let go of by its registering thread after the token or timeout
    /// decided (<see cref="CombinatorCore.LetGoAfterDecision"/>) is accounted for as a finished one.
    /// </summary>
    protected override void OnInputLetGo()
    {
        if (CountsInputs)
        {
            InputsLetGo(1);
        }
        Release();
    }

    /// <summary>
    /// Counts <paramref name="count"/> inputs that were let go of after a token or timeout decided (they never call back)
    /// as finished; whoever accounts for the last input reports the failures the inputs left in their slots, as no
    /// callback will.
    /// </summary>
    private void InputsLetGo(int count)
    {
        if (Interlocked.Add(ref _inputsLeft, -count) == 0)
        {
            ReportStoredFailures();
        }
    }

    /// <summary>
    /// Takes a WhenAll's timer out of the wheel once its token or its timeout decided (<see cref="DecideAllEarly"/>; the
    /// timeout's own continuation finds it claimed, <see cref="TimerCancel.TooLate"/>), where <see cref="CompleteAll"/> takes
    /// it out itself when the inputs finish. Called before the combined task completes, so nothing is left in the wheel when
    /// the consumer resumes; the consumer's reference, which it drops only after that publication, keeps the object, so the
    /// release below never recycles.
    /// </summary>
    private void CancelTimer()
    {
        if (_timer.TryCancel() == TimerCancel.Cancelled)
        {
            Release(); // its continuation will never run: drop the reference it held
        }
    }

    private void Cancel()
    {
        if (IsAny && !StartsProducers)
        {
            // Cancellation takes the race like an input would, through the core's CAS (see CompleteAny), and lets go of
            // the inputs as a winner does.
            if (_core.IsCompletingOrCompleted)
            {
                return; // an input won first
            }
            // Lazily: the exception is built only for a reader that throws it, from _cancelToken, which this use keeps
            // until it is recycled (LazyCancellation).
            if (_core.TryBeginCompletion(out object? waiter))
            {
                _winner = CancelledRace;
                LetGoOfLosers(-1);
                _core.EndCompletionCanceledLazily(waiter);
            }
            return;
        }
        // For WhenAny over producers, cancellation takes the race like an input would: so the producers' own
        // cancellations, which complete their inputs on this thread below, lose to it, and the combined task is cancelled
        // by the caller's token.
#if DEBUG
        if (IsAny)
        {
            TestHookBeforeWinnerClaim?.Invoke(this, true);
        }
#endif
        if (IsAny && Interlocked.CompareExchange(ref _winner, CancelledRace, -1) != -1)
        {
            return; // an input won first: that is the outcome
        }
        if (StartsProducers)
        {
            CancelProducers();
            _core.TrySetCanceledLazily();
            return;
        }
        if (!_core.IsCompletingOrCompleted)
        {
            DecideAllEarly(null); // canceled by _cancelToken, lazily
        }
    }

    /// <summary>The token that canceled this use (<see cref="ILazyCanceledSource"/>): kept until the combinator is recycled.</summary>
    CancellationToken ILazyCanceledSource.CanceledBy => _cancelToken;

    private void DropRegistration()
    {
        // Only a use whose token can be cancelled registered anything (Start): the common case skips the call.
        if (_cancelToken.CanBeCanceled)
        {
            CancellationRegistrations.Drop(ref _registration);
        }
    }

    /// <summary>
    /// The token's callback: <see cref="Cancel"/>, bracketed so that a use cancelled by its token is still recycled, and
    /// never under a callback that is still running.
    /// </summary>
    /// <remarks>
    /// Invariant: once <see cref="DropRegistration"/> has returned, the callback has either finished or is running on a
    /// stack below the thread that dropped it (the continuation the cancellation completed ran inline inside it, and that
    /// continuation read the combined task); dropping waits for a callback running on any other thread
    /// (<see cref="CancellationRegistrations.Drop"/>), and a callback cannot start after it. So <see cref="Recycle"/>,
    /// which drops first, meets <see cref="_cancelState"/> either idle (recycle now) or running, in which case it hands
    /// the recycling to the callback by one CAS (running to deferred), and the callback's exchange back to idle as it
    /// returns finds that hand-over. Exactly one of the two recycles: the CAS and the exchange order the race between a
    /// recycle on another thread and the callback's return. The callback's writes precede its exchange, so the recycler
    /// sees them all before it clears the object. Before, an object whose callback had started at all was left to the GC
    /// (one combinator per cancelled call); the same hand-over of a release between two parties as
    /// <see cref="CombinatorCore"/>'s reference count, with the state word in place of the count.
    /// </remarks>
    private void RunCancel()
    {
        Volatile.Write(ref _cancelState, CancelRunning);
        try
        {
            Cancel();
        }
        finally
        {
            if (Interlocked.Exchange(ref _cancelState, CancelIdle) == CancelRecycleDeferred)
            {
                RecycleNow();
            }
        }
    }

    /// <summary>Makes this WhenAny the owner of its inputs' token (see the remarks); returns the token to hand to producers.</summary>
    public CancellationToken StartProducers()
    {
        StartsProducers = true;
        LetsGoOfLosers = false; // producers' losers answer their token instead
        _unfinishedProducers = 0;
        return (_producerSource ??= new CancellationTokenSource()).Token;
    }

    /// <summary>Counts one more producer as running, unless the race is already decided (then no more are started).</summary>
    public bool TryStartProducer()
    {
        Interlocked.Increment(ref _unfinishedProducers);
        if (Volatile.Read(ref _winner) == -1)
        {
            return true;
        }
        Interlocked.Decrement(ref _unfinishedProducers);
        return false;
    }

    /// <summary>
    /// Registering input <paramref name="index"/> threw <paramref name="error"/> (the caller's error: a task already
    /// awaited elsewhere, or passed twice in one call), and the caller gets that exception instead of the combined task.
    /// So that nothing is left half-done: that input counts as failed with the error, the inputs after it were never
    /// taken (their counts and references go), and the combined task is read when it completes, as its consumer would
    /// (so the combinator goes back to its pool, and a failure of an earlier input is reported, not lost). A WhenAny's race
    /// is then decided, at once, so it lets go of the inputs registered before as it lets go of losers; a WhenAll reads
    /// them when they finish, or lets go of them if its token or timeout decides first.
    /// </summary>
    public void AbandonAfterFailedRegistration(int index, Exception error)
    {
        // The failed registration may have published the slot's source already: it is someone else's, never to be read
        // here (a decider that met it meanwhile finds it gone: see ReadLoserNow); and a typed ValueTask it kept goes too.
        Slot failed = Slots[index];
        Volatile.Write(ref failed.Source, null);
        failed.Typed?.Clear();
        int neverTaken = _count - index - 1;
        if (neverTaken > 0)
        {
            // Before input `index` is settled, so that it still holds a count and the last-input tests stay true.
            ReleaseKept(neverTaken);
            if (CountsInputs)
            {
                Interlocked.Add(ref _inputsLeft, -neverTaken);
            }
        }
        _abandonedWith = error;
        AddFailed(index, error);
        _core.OnCompleted(s_readAbandoned, this, _core.Version);
    }

    private static readonly Action<object?> s_readAbandoned = static o => ((Combinator<TResult>)o!).ReadAbandoned();

    /// <summary>
    /// The consumer of a combination whose caller got an exception instead (<see cref="AbandonAfterFailedRegistration"/>):
    /// reads it and reports the inputs' failures, except the caller's error, since nobody else will see them. A WhenAll
    /// reports every failure its slots kept (<see cref="CompleteAll"/>), not only those its combined failure carries: without
    /// aggregation that is the lowest index's alone, and a later input's fault, which its read consumed, was lost (found by
    /// the review of stop 31's changes, <c>AbandonedRegistrationReportTests</c>). A WhenAny's failure is its winner's. Each
    /// is reported once per completion: one read from a source that a read does not consume (a promise's task, a task made
    /// failed, a BCL task) claims that completion's report (<see cref="CombinatorCore.ReportLoserOnce"/>), as a loser's
    /// does, so a Forget() of the same task, before or after, or another combinator over the same BCL task, reports nothing
    /// more; a BCL task that faulted with several exceptions gives each (<see cref="CombinatorCore.ReportLoser(ExceptionDispatchInfo?)"/>).
    /// </summary>
    /// <remarks>
    /// The slot by slot report replaces two earlier ones that matched the combined failure's exceptions to the slots'
    /// failures: unclaimed, a Forget() of the same task reported a second time (found by the review of the defects left
    /// alone); matched exception by exception, an aggregate reported a BCL task's second exception twice, and two
    /// completions failed with one exception object once (found by the review of stop 30's changes).
    /// </remarks>
    private void ReadAbandoned()
    {
        Exception? thrown = _abandonedWith; // read first: the read below may recycle this object
        bool decidedEarly = _decidedEarly; // likewise; a token or timeout that decided reported the stored failures itself
        // A WhenAll's slots hold what CompleteAll kept for this reader; a WhenAny's losers may still be using theirs.
        List<(ExceptionDispatchInfo Error, object? Origin, short Token)>? failures = decidedEarly || IsAny ? null : TakeKeptFailures(thrown);
        // A WhenAny's failure is its winner's: the one input that can be its origin.
        object? winner = null;
        short winnerToken = 0;
        if (IsAny && WinnerFaultOrigin is { } origin)
        {
            winner = origin; // a source a read does not consume, or a BCL task
            winnerToken = Slots[_winner].Token;
        }
        bool isAny = IsAny;
        ReadQuietly(_core.Version, out ExceptionDispatchInfo? error);
        LazyCancellation.PassedOn(error);
        if (error is null || decidedEarly)
        {
            return;
        }
        if (!isAny)
        {
            if (failures is not null)
            {
                foreach ((ExceptionDispatchInfo failure, object? readFrom, short token) in failures)
                {
                    ReportLoserOnce(failure, readFrom, token);
                }
            }
            return;
        }
        if (error.SourceException != thrown)
        {
            // The winner's failure (passed on as it is): nobody else will ever see it.
            ReportLoserOnce(error, winner, winnerToken);
        }
    }

    /// <summary>
    /// Before the read that recycles this object: a WhenAll's failures but the caller's error <paramref name="thrown"/>,
    /// each with what it was read from (when a read does not consume that) and its token, from the slots that
    /// <see cref="CompleteAll"/> kept for this reader (cleared here, so the pooled object holds no input); null if there
    /// are none.
    /// </summary>
    private List<(ExceptionDispatchInfo Error, object? Origin, short Token)>? TakeKeptFailures(Exception? thrown)
    {
        List<(ExceptionDispatchInfo, object?, short)>? failures = null;
        Slot[] slots = Slots;
        for (int i = 0; i < _count; i++)
        {
            if (slots[i].Error is { } failure && failure.SourceException != thrown)
            {
                (failures ??= new()).Add((failure, slots[i].ErrorOrigin, slots[i].Token));
            }
            slots[i].Error = null;
            slots[i].ErrorOrigin = null;
        }
        return failures;
    }

    private void CancelProducers()
    {
        try
        {
            _producerSource!.Cancel();
        }
        catch (AggregateException ex)
        {
            // Callbacks that producers registered on the token threw: report them, never let them break the combinator.
            foreach (Exception inner in ex.InnerExceptions)
            {
                UnobservedExceptions.Report(inner);
            }
        }
    }

    /// <summary>
    /// The combined task, once every input is registered. If it has already succeeded, its result is read now, so the
    /// caller gets a task with the result inline and the combinator goes back to its pool as soon as its inputs allow.
    /// </summary>
    public SpindleTask<TResult> ToTask(short token)
        => _core.StatusUnchecked == SpindleTaskStatus.Succeeded ? new SpindleTask<TResult>(GetResult(token)) : new SpindleTask<TResult>(this, token);

    /// <summary>As <see cref="ToTask"/>, for a combined task with no result.</summary>
    public SpindleTask ToVoidTask(short token)
    {
        if (_core.StatusUnchecked == SpindleTaskStatus.Succeeded)
        {
            GetResult(token);
            return default;
        }
        return new SpindleTask(this, token);
    }

    protected override void OnInputCompleted(Slot slot)
    {
#if DEBUG
        TestHookBeforeInputRead?.Invoke(slot.Index);
#endif
        if (IsAny)
        {
            CompleteAny(slot); // reads the input and drops its reference
            return;
        }
        if (CountsInputs)
        {
            // The token or the timeout may decide first and read this input itself (ReadLoserNow): the read is claimed,
            // and whoever loses the claim leaves it to the other (which reports a failure it reads).
            if (slot.TryClaimRead())
            {
                // Published to the last input by the interlocked decrement below, with the set a signal's wait took: the
                // outcome decides whether that set reached the caller (CompleteAll) or is given back (DecideAllEarly,
                // ReportStoredFailures, or here).
                ExceptionDispatchInfo? failure = slot.ReadInput(out Signal? takenSet, out object? origin);
                slot.KeepFailure(failure, origin); // a report of it claims it (ReportStoredFailures)
                if (takenSet is not null)
                {
                    // The exchange is a full fence before the read of the core (the other half of DecideAllEarly's pair).
                    // Claimed before this input's decrement, the core was claimed by the token or the timeout: the last
                    // input's CompleteAll needs this decrement first. So the set never reaches the caller: given back.
                    Interlocked.Exchange(ref slot.TakenSet, takenSet);
                    if (_core.IsCompletingOrCompleted)
                    {
                        GiveBackSet(Interlocked.Exchange(ref slot.TakenSet, null), slot.Token);
                    }
                }
                slot.EndRead();
            }
            // The combined task may already have completed (timed out, cancelled) and its consumer dropped its reference:
            // the last input is the one that brings the input count to zero, and it still holds its own reference, which
            // CompleteAll drops. A lone input is the last by itself (WithTimeout, WithCancellation): it is accounted for
            // either here or, if it was detached, by InputsLetGo, never both (a detached input never calls back), so its
            // count needs no interlocked step and stays as Start set it.
            if (_count == 1 || Interlocked.Decrement(ref _inputsLeft) == 0)
            {
                CompleteAll(inputReferences: 1);
                return;
            }
            Release();
            return;
        }
        // Read the input exactly once: this returns a pooled input to its pool and observes its exception. Kept, with
        // where it came from (for the reader of a combination whose registration failed: ReadAbandoned), published to
        // the last input by the interlocked decrement below.
        ExceptionDispatchInfo? error = slot.ReadInput(out object? readFrom);
        slot.KeepFailure(error, readFrom);
        int remaining = Interlocked.Decrement(ref _references);
        if (remaining > 1)
        {
            return;
        }
        // The last input: only the consumer's reference is left, and the consumer acts only once the combined task has
        // completed, which is below.
        CompleteAll(inputReferences: 0);
    }

    private void CompleteAny(Slot slot)
    {
        if (StartsProducers)
        {
            CompleteAnyOfProducers(slot.Index, slot.ReadInput(out Signal? takenSet, out _), takenSet);
            return;
        }
        // The core's own CAS decides the race, against the other inputs and the cancellation: one atomic step where a
        // separate winner field would take a second. A later input finds the core completing or completed, and loses.
        if (!_core.TryBeginCompletion(out object? waiter))
        {
            if (slot.Kind == InputKind.Read && _abandonedWith is { } thrown && slot.Error?.SourceException == thrown)
            {
                slot.Error = null; // the failed registration's error: the caller got it, so it is not reported too
            }
            ReadLoser(slot);
            return;
        }
        // The winner's slot is read by nobody else: the decider skips it, and so does a registrant (by _winner).
        ExceptionDispatchInfo? error = slot.ReadInput(out object? origin);
        if (error is not null && FaultReport.IsRereadable(origin))
        {
            slot.ErrorOrigin = origin; // a second copy of this completion among the losers is not reported
        }
        Volatile.Write(ref _winner, slot.Index); // after the origin: a loser may be waiting for it (IsTheWinnersFailure)
        // Under the mark, before the combined task completes, so that its continuation may reset or reuse the losing
        // inputs at once.
        LetGoOfLosers(slot.Index);
        // The publication: from here on the consumer may recycle this object, and nothing here touches it.
        _core.EndCompletion(waiter, error);
    }

    /// <summary>
    /// WhenAny over producers: the first input wins a CAS on <see cref="CombinatorCore._winner"/>, which the producers' start loop reads
    /// (see the remarks), and the losers are cancelled through their token and read when they answer it.
    /// </summary>
    private void CompleteAnyOfProducers(int index, ExceptionDispatchInfo? error, Signal? takenSet)
    {
        Interlocked.Decrement(ref _unfinishedProducers);
#if DEBUG
        TestHookBeforeWinnerClaim?.Invoke(this, false);
#endif
        if (Volatile.Read(ref _winner) != -1 || Interlocked.CompareExchange(ref _winner, index, -1) != -1)
        {
            ReportLoser(error);
            Release();
            // A losing signal wait's set never reached the caller. Set again, not given back by the rule of the other
            // combinators (GiveBackSet): the wait is the producer's own, which the caller never held, and a loser answers
            // its token after the publication, when the consumer may be waiting on the signal again (that wait takes it).
            takenSet?.Set();
            return;
        }
        if (Volatile.Read(ref _unfinishedProducers) > 0)
        {
            CancelProducers();
        }
        Release(); // the consumer's reference keeps the object until the result is read
        bool set = error is null ? _core.TrySetResult(default) : _core.TrySetException(error);
        if (!set)
        {
            ReportLoser(error); // cancelled first: the failure is reported, not lost
            takenSet?.Set(); // and a signal's set is kept
        }
    }

    /// <summary>
    /// The last input finished: completes the combined task from the inputs, unless the token or the timeout decided
    /// first. <paramref name="inputReferences"/> is the calling input's own reference if it still holds one (a WhenAll
    /// that counts its inputs apart from its references): dropped here, with the timer's if its cancellation took it, in
    /// one interlocked step before the publication, while the consumer's reference keeps the object. With one input whose
    /// timer the cancel took (an in-time <c>WithTimeout</c>), the consumer's read then finds its reference the last
    /// (<see cref="CombinatorCore.ReleaseLast"/>: no interlocked step there either), where the timer's, the reader's and the
    /// input's releases were three (<c>docs/decisions.md</c> section 58); other inputs still releasing, or a timer's
    /// continuation that fired first (<see cref="TimerCancel.CancelledAfterFiring"/>, which keeps its own), leave it more.
    /// </summary>
    private void CompleteAll(int inputReferences)
    {
        int drop = inputReferences;
        if (Timed && _timer.TryCancel() == TimerCancel.Cancelled)
        {
            drop++; // its continuation will never run: the reference it held goes with the input's
        }
        // The combined failure is built before the core is claimed (others wait while it is held, and an allocation that
        // failed under the claim would leave it held for ever); the core is claimed before the slots are cleared, and they
        // are cleared before it is published: from the publication on, the consumer may recycle this object and start
        // another use in it (inline, in the continuation that the publication runs), so nothing here touches a slot
        // afterwards.
        Slot[] slots = Slots;
        var failures = new WhenAllFailures(Aggregate);
        for (int i = 0; i < _count; i++)
        {
            failures.Add(slots[i].Error);
        }
        ExceptionDispatchInfo? outcome = failures.Result;
        if (!_core.TryBeginCompletion(out object? waiter))
        {
            // Cancelled or timed out first: the failures are reported, not lost, and the sets are given back. Then the
            // references go, which may recycle this object (its consumer may have read it already).
            ReportStoredFailures();
            Release(drop);
            return;
        }
        // A combination whose registration failed keeps its slots' failures for its one reader, which reports them and
        // clears them (ReadAbandoned); nothing reuses this object before that reader's read.
        bool keepFailures = _abandonedWith is not null;
        for (int i = 0; i < _count; i++)
        {
            if (!keepFailures)
            {
                slots[i].Error = null;
                slots[i].ErrorOrigin = null;
            }
            slots[i].TakenSet = null; // completed from its inputs (a success, or an input's fault): their sets go with them
        }
        ReleaseKept(drop); // never the last: the consumer's reference keeps the object until its read, after the publication
        _core.EndCompletion(waiter, outcome);
    }

    /// <summary>
    /// Gives back the sets that a WhenAll's callbacks left in its slots (<see cref="CombinatorCore.Slot.TakenSet"/>;
    /// <see cref="CombinatorCore.GiveBackSet"/>), each taken with an exchange against the callback's own (so once), and
    /// only where one is: the caller has claimed the core (a full fence) before this reads them, the other half of the
    /// callback's pair.
    /// </summary>
    private void GiveBackStoredSets()
    {
        Slot[] slots = Slots;
        for (int i = 0; i < _count; i++)
        {
            if (Volatile.Read(ref slots[i].TakenSet) is not null)
            {
                GiveBackSet(Interlocked.Exchange(ref slots[i].TakenSet, null), slots[i].Token);
            }
        }
    }

    /// <summary>
    /// A WhenAll decided by its token or timeout, once every input is accounted for: the failures its inputs left in their
    /// slots are reported (not rethrown: the combined task was cancelled or timed out), and cleared; the sets that its
    /// signal inputs took are given back.
    /// </summary>
    private void ReportStoredFailures()
    {
        Slot[] slots = Slots;
        GiveBackStoredSets();
        for (int i = 0; i < _count; i++)
        {
            ExceptionDispatchInfo? error = slots[i].Error;
            object? origin = slots[i].ErrorOrigin;
            slots[i].Error = null;
            slots[i].ErrorOrigin = null;
            if (error is not null && error.SourceException != _abandonedWith)
            {
                // Not the failed registration's error (the caller got that one); once per completion, as a loser's.
                ReportLoserOnce(error, origin, slots[i].Token);
            }
        }
    }

    protected override void Recycle()
    {
        DropRegistration();
        // A callback still running below on some stack (see RunCancel) recycles this object as it returns.
        if (Volatile.Read(ref _cancelState) == CancelRunning
            && Interlocked.CompareExchange(ref _cancelState, CancelRecycleDeferred, CancelRunning) == CancelRunning)
        {
            return;
        }
        RecycleNow();
    }

    /// <summary>Clears this object and returns it to its pool: no callback of its token's can run any more.</summary>
    private void RecycleNow()
    {
        _cancelToken = default;
        _compose = null;
        if (IsAny && (uint)_winner < (uint)_count)
        {
            Slots[_winner].ErrorOrigin = null; // the winner's failure's origin (see Slot.ErrorOrigin)
        }
        _abandonedWith = null;
        _decidedEarly = false;
        TimeoutIsResult = false;
        _timedOut = false;
        Timed = false;
        CountsInputs = false;
        LetsGoOfLosers = false;
        _timers = null;
        _timer = default;
        _destination = default!;
        ClearValues();
        if (StartsProducers)
        {
            StartsProducers = false;
            ReleaseProducerSource();
        }
        _core.ClearForPool();
        ObjectPool<Combinator<TResult>>.Return(this);
    }

    /// <summary>
    /// Keeps the producers' token source for the next use if it was never cancelled (every producer has finished by now);
    /// a cancelled source cannot be reset, so it is left to the GC. It is not disposed: it holds no timer or handle, and a
    /// producer that kept its token past its own completion must not see it throw.
    /// </summary>
    private void ReleaseProducerSource()
    {
#if NET
        if (_producerSource!.TryReset())
        {
            return;
        }
#endif
        _producerSource = null;
    }

    public TResult GetResult(short token)
    {
        TResult result = ReadQuietly(token, out ExceptionDispatchInfo? error);
        if (error is not null)
        {
            throw LazyCancellation.ToThrow(error);
        }
        return result;
    }

    /// <summary>
    /// The read of a <see cref="SpindleTask"/>'s awaiter (a WhenAll of untyped tasks, a WhenAny awaited as untyped): the
    /// same read and throw as <see cref="GetResult"/>, written out rather than a call to it, so that a cancellation it
    /// throws is thrown at this frame (see <see cref="LazyCancellation.ToThrow"/>), as a delay's is, whatever the JIT inlines.
    /// </summary>
    void IValueTaskSource.GetResult(short token)
    {
        ReadQuietly(token, out ExceptionDispatchInfo? error);
        if (error is not null)
        {
            throw LazyCancellation.ToThrow(error);
        }
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public TResult ReadQuietly(short token, out ExceptionDispatchInfo? error)
    {
        _core.Consume(token, this, out error);
        DropRegistration(); // the wait is over: nothing stays registered behind it, even while losers still run
        // Composed while the consumer's reference still keeps the cells: after Release they may be recycled.
        TResult result = error is null && _compose is { } compose ? compose(this) : default!;
        ReleaseLast();
        return result;
    }

    ExceptionDispatchInfo? IQuietSource.ReadQuietly(short token)
    {
        ReadQuietly(token, out ExceptionDispatchInfo? error);
        return error;
    }

    public SpindleTaskStatus GetStatus(short token) => _core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource<TResult>.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}
