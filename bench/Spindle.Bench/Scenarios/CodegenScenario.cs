using System;
using System.Diagnostics;
using System.IO;
using System.Reflection;
using System.Reflection.Metadata;
using System.Reflection.Metadata.Ecma335;
using System.Reflection.PortableExecutable;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Bench.Scenarios;

/// <summary>
/// Seed 004's code-size test: the IL that the compiler emits for N chained async methods, per return type. The methods
/// are generated (<see cref="CodegenSubjects"/>, from tools/Spindle.Generate) with the same bodies for Task, ValueTask
/// and SpindleTask; this scenario reads the bench assembly's own file with System.Reflection.Metadata and sums the IL of
/// each class's kickoff stubs and of the state machines the compiler nested in it.
/// </summary>
public sealed class CodegenScenario : Scenario
{
    /// <summary>The argument each chain is run with once, to check that the methods work.</summary>
    private const int Input = 7;

    public override string Id => "codegen";

    public override string Title => "IL size of N chained async methods per return type";

    public override string Seed => "004";

    public override string Baseline => "Task";

    public override string Notes =>
        $"Three generated classes (bench/Spindle.Bench/Scenarios/CodegenSubjects.Generated.cs, written by tools/Spindle.Generate) each hold {CodegenSubjects.MethodCount} " +
        "chained async methods with the same body text; only the return type differs (Task<int>, ValueTask<int>, SpindleTask<int>). Method k awaits method k + 1 " +
        "and does a little arithmetic; the last awaits Task.Yield(). The scenario opens the bench assembly's own file with System.Reflection.Metadata (PEReader) " +
        "and sums the IL bytes of each class's kickoff stubs and of every IAsyncStateMachine type nested in it (MoveNext, SetStateMachine, and a constructor " +
        "in a Debug build, whose state machines are classes), divided by the method count; state_machines counts those types (one per method). " +
        "stub_ and state_machine_il_bytes_per_method split the total. Each chain is also run once and its result checked. IL only: the builders' own code " +
        "(CoreLib's, Spindle.dll's) exists once whatever N, and native code after JIT or AOT is not measured.";

    public override void Run(BenchContext context)
    {
        int n = CodegenSubjects.MethodCount;
        string caseName = $"methods={n}";

        context.Progress($"{caseName} › running each chain once");
        int expected = Expected(Input, n);
        Check("Task", CodegenSubjects.TaskChain.Step00(Input).GetAwaiter().GetResult(), expected);
        Check("ValueTask", CodegenSubjects.ValueTaskChain.Step00(Input).AsTask().GetAwaiter().GetResult(), expected);
        Check("Spindle", CodegenSubjects.SpindleChain.Step00(Input).GetAwaiter().GetResult(), expected);

        Assembly assembly = typeof(CodegenSubjects).Assembly;
        string path = assembly.Location;
        if (string.IsNullOrEmpty(path) || !File.Exists(path))
        {
            throw new InvalidOperationException("The codegen scenario reads the bench assembly's file, but this build has none on disk (a single-file publish?). Run it with `dotnet run`.");
        }
        bool optimized = assembly.GetCustomAttribute<DebuggableAttribute>()?.IsJITOptimizerDisabled != true;
        context.Progress($"{caseName} › reading the IL of {Path.GetFileName(path)} ({(optimized ? "optimized" : "Debug, not optimized")})");

        using FileStream stream = File.OpenRead(path);
        using var pe = new PEReader(stream);
        MetadataReader metadata = pe.GetMetadataReader();
        Measure(context, caseName, "Task", pe, metadata, typeof(CodegenSubjects.TaskChain), n);
        Measure(context, caseName, "ValueTask", pe, metadata, typeof(CodegenSubjects.ValueTaskChain), n);
        Measure(context, caseName, "Spindle", pe, metadata, typeof(CodegenSubjects.SpindleChain), n);
    }

    /// <summary>What <c>Step00(x)</c> returns: f(k, x) = f(k + 1, x + k + 1) * 31 + x, and f(n - 1, x) = x * 2 + 1.</summary>
    private static int Expected(int x, int n)
    {
        var arguments = new int[n];
        arguments[0] = x;
        for (int k = 1; k < n; k++)
        {
            arguments[k] = unchecked(arguments[k - 1] + k);
        }
        int r = unchecked(arguments[n - 1] * 2 + 1);
        for (int k = n - 2; k >= 0; k--)
        {
            r = unchecked(r * 31 + arguments[k]);
        }
        return r;
    }

    private static void Check(string system, int actual, int expected)
    {
        if (actual != expected)
        {
            throw new InvalidOperationException($"codegen: the {system} chain returned {actual}, expected {expected}.");
        }
    }

    private static void Measure(BenchContext context, string caseName, string system, PEReader pe, MetadataReader metadata, Type chainClass, int n)
    {
        var handle = (TypeDefinitionHandle)MetadataTokens.EntityHandle(chainClass.MetadataToken);
        TypeDefinition chain = metadata.GetTypeDefinition(handle);

        // The kickoff stubs: the methods as written, which create the state machine, start it and return the task.
        int stubs = 0;
        long stubBytes = 0;
        foreach (MethodDefinitionHandle m in chain.GetMethods())
        {
            if (IlBytes(pe, metadata, m) is int bytes)
            {
                stubs++;
                stubBytes += bytes;
            }
        }
        if (stubs != n)
        {
            throw new InvalidOperationException($"codegen: {chainClass.Name} has {stubs} methods with a body, expected {n}.");
        }

        // The state machines the compiler nested in the class, with all their methods (MoveNext, SetStateMachine).
        int machines = 0;
        long machineBytes = 0;
        foreach (TypeDefinitionHandle nested in chain.GetNestedTypes())
        {
            TypeDefinition type = metadata.GetTypeDefinition(nested);
            if (!IsAsyncStateMachine(metadata, type))
            {
                continue;
            }
            machines++;
            foreach (MethodDefinitionHandle m in type.GetMethods())
            {
                machineBytes += IlBytes(pe, metadata, m) ?? 0;
            }
        }

        context.Add(caseName, system, "il_bytes_per_method", (double)(stubBytes + machineBytes) / n);
        context.Add(caseName, system, "state_machines", machines);
        context.Add(caseName, system, "stub_il_bytes_per_method", (double)stubBytes / n);
        context.Add(caseName, system, "state_machine_il_bytes_per_method", (double)machineBytes / n);
    }

    /// <summary>The size of a method's IL code (without the body header and exception clauses), or null if it has no body.</summary>
    private static int? IlBytes(PEReader pe, MetadataReader metadata, MethodDefinitionHandle handle)
    {
        MethodDefinition method = metadata.GetMethodDefinition(handle);
        return method.RelativeVirtualAddress == 0 ? null : pe.GetMethodBody(method.RelativeVirtualAddress).GetILReader().Length;
    }

    private static bool IsAsyncStateMachine(MetadataReader metadata, TypeDefinition type)
    {
        foreach (InterfaceImplementationHandle i in type.GetInterfaceImplementations())
        {
            EntityHandle iface = metadata.GetInterfaceImplementation(i).Interface;
            if (iface.Kind == HandleKind.TypeReference)
            {
                TypeReference reference = metadata.GetTypeReference((TypeReferenceHandle)iface);
                if (metadata.StringComparer.Equals(reference.Name, "IAsyncStateMachine")
                    && metadata.StringComparer.Equals(reference.Namespace, "System.Runtime.CompilerServices"))
                {
                    return true;
                }
            }
        }
        return false;
    }
}
